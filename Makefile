# torchd: build, models, run, test.
#
#   make run     setup + build + models, then serve the model zoo
#   make test    everything CI runs
#
# LIBTORCH points at the LibTorch to build libtorchd_c against: /usr (Debian's CPU build,
# the default) or an unpacked LibTorch / CUDA PyTorch `torch/` folder with include/ and lib/.

SHELL      := /bin/bash
LIBTORCH   ?= /usr
PYTHON     ?= /usr/bin/python3
GO         ?= go
BIN        := bin
MODELS_OUT := models/out
STORE      := model-store
SUDO       := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS   := libtorch-dev python3-torch python3-torchvision python3-sklearn python3-pil \
              python3-numpy libopenblas0-openmp libturbojpeg0-dev apache2-utils wrk curl g++ make

ifeq ($(LIBTORCH),/usr)
  TORCH_CFLAGS  := -I/usr/include/torch/csrc/api/include
  TORCH_LDFLAGS :=
else
  TORCH_CFLAGS  := -I$(LIBTORCH)/include -I$(LIBTORCH)/include/torch/csrc/api/include
  TORCH_LDFLAGS := -L$(LIBTORCH)/lib -Wl,-rpath,$(LIBTORCH)/lib
endif
# Without --no-as-needed the linker drops libtorch_cuda, whose static initializers register
# the CUDA backend, and cuda:0 then fails at run time.
TORCH_LIBS := -Wl,--no-as-needed -ltorch $(if $(wildcard $(LIBTORCH)/lib/libtorch_cuda.so),-ltorch_cuda -lc10_cuda) -ltorch_cpu -lc10 -Wl,--as-needed

.PHONY: all setup lib build models archives run test test-go test-fuzz bench bench-smoke vet fmt clean

all: build

setup: $(BIN)/.setup
$(BIN)/.setup:
	@mkdir -p $(BIN)
	@if dpkg -s $(APT_PKGS) >/dev/null 2>&1; then echo "setup: packages present"; else \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PKGS); fi
	@# OpenBLAS on OpenMP: ~29x faster than the reference BLAS for Linear (docs/blas.md).
	$(SUDO) update-alternatives --set libblas.so.3-$$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu) \
	  /usr/lib/$$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)/openblas-openmp/libblas.so.3
	@touch $@

# The C ABI library. Compiling it takes ~15 s, so it is rebuilt only when its sources change.
lib: $(BIN)/libtorchd_c.so
$(BIN)/libtorchd_c.so: torch/capi/torchd.cc torch/capi/torchd.h
	@mkdir -p $(BIN) build
	g++ -std=c++17 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 -Wall $(TORCH_CFLAGS) -c torch/capi/torchd.cc -o build/torchd.o
	g++ -shared -o $@ build/torchd.o -Wl,--no-undefined $(TORCH_LDFLAGS) $(TORCH_LIBS)

build: lib
	$(GO) build -o $(BIN)/torchd ./cmd/torchd

models: $(MODELS_OUT)/.done
$(MODELS_OUT)/.done: $(wildcard models/*.py)
	$(PYTHON) models/build_all.py --out $(MODELS_OUT)
	@touch $@

run: setup build models
	$(BIN)/torchd version

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# Tests use the zoo in models/out; they run once plainly and the binding once more under
# cgocheck2, which checks every Go pointer that crosses into C.
test: setup lib models vet
	$(GO) test -count=1 ./...
	GOEXPERIMENT=cgocheck2 $(GO) test -count=1 ./torch/

bench: setup lib models
	$(GO) test -run='^$$' -bench=. -benchtime=20x -count=5 ./torch/ | tee build/bench-torch.txt
	$(PYTHON) torch/testdata/bench_python.py --models $(MODELS_OUT) | tee build/bench-python.txt

clean:
	rm -rf $(BIN)/torchd $(BIN)/libtorchd_c.so build
