#!/usr/bin/env bash
# Runs TorchServe's own API test collections (test/postman in pytorch/serve) with newman
# against torchd, as TorchServe's ts_scripts/api_utils.py runs them against TorchServe: the
# management, inference, explanation, KServe v1/v2 and HTTPS collections, each against a
# fresh torchd with the config.properties api_utils.py writes for it.
#
# Usage: bench/tspostman.sh SERVE_CHECKOUT [OUT]
#   SERVE_CHECKOUT  a pytorch/serve checkout (0.12): its collections, data files, example
#                   models and test inputs are read from it, nothing is copied into torchd.
#   OUT             work directory (default build/tspostman); newman's reports land there.
# Needs npm (newman is installed into OUT), the project venv with torch-model-archiver
# (make handler-runtime) and bin/torchd (make build). Ports 8080-8082 and 8443-8445 must be
# free: the collections name them.
#
# The archives are built from TorchServe's examples with seeded random weights (their
# trained weights are downloads), so assertions on predicted values fail by design; the
# summary marks them, and every other failure is a contract failure.
set -euo pipefail

SERVE=$(cd "${1:?usage: bench/tspostman.sh SERVE_CHECKOUT [OUT]}" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mkdir -p "${2:-$ROOT/build/tspostman}" && cd "${2:-$ROOT/build/tspostman}" && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
ARCHIVER=$(dirname "$PY")/torch-model-archiver
TORCHD=${TORCHD:-$ROOT/bin/torchd}
NEWMAN=$OUT/newman/node_modules/.bin/newman

[ -x "$NEWMAN" ] || npm install --silent --prefix "$OUT/newman" newman@6 >/dev/null

# The layout api_utils.py runs newman in: test/ beside examples/ and kubernetes/.
W=$OUT/work
rm -rf "$W"
mkdir -p "$W/test" "$W/store"
cp -r "$SERVE/test/postman" "$SERVE/test/resources" "$W/test/"
mkdir -p "$W/examples/image_classifier" "$W/kubernetes/kserve"
cp -r "$SERVE/examples/image_classifier/mnist" "$SERVE/examples/image_classifier/squeezenet" \
	"$SERVE/examples/image_classifier/resnet_18" "$SERVE/examples/image_classifier/resnet_152_batch" \
	"$SERVE/examples/image_classifier/densenet_161" "$SERVE/examples/image_classifier/kitten.jpg" "$W/examples/image_classifier/"
cp -r "$SERVE/kubernetes/kserve/kf_request_json" "$W/kubernetes/kserve/"

# archive NAME DIR HANDLER: the example's model.py (mnist.py) with seeded random weights.
archive() {
	local dir=$W/examples/image_classifier/$2 model=model.py
	[ -f "$dir/$model" ] || model=mnist.py
	(cd "$dir" && "$PY" -c "import inspect, torch, ${model%.py} as m; torch.manual_seed(0); \
cls = [c for _, c in inspect.getmembers(m, inspect.isclass) if c.__module__ == m.__name__ and issubclass(c, torch.nn.Module)][0]; \
torch.save(cls().state_dict(), 'weights.pt')" &&
		"$ARCHIVER" --model-name "$1" --version 1.0 --model-file "$model" --serialized-file weights.pt --handler "$3" \
			$([ -f index_to_name.json ] && echo --extra-files index_to_name.json) --export-path "$W/store" --force &&
		rm weights.pt)
}
archive mnist mnist mnist_handler.py
archive squeezenet1_1 squeezenet image_classifier
archive resnet-18 resnet_18 image_classifier
archive resnet-152-batch resnet_152_batch image_classifier
archive densenet161 densenet_161 image_classifier

# The inference collection's rows for the archives built here (the others are downloads).
"$PY" - "$W/test/postman" <<'EOF'
import json, os, sys
d = os.path.join(sys.argv[1])
rows = json.load(open(os.path.join(d, "inference_data.json")))
local = [r for r in rows if r["url"].startswith("{{mar_path_") and r["model_name"] in ("squeezenet1_1", "resnet-18", "resnet152", "densenet161")]
json.dump(local, open(os.path.join(d, "inference_data_local.json"), "w"))
EOF

# run NAME CONFIG COLLECTION [DATA] [NEWMAN ARGS...]: a fresh torchd with CONFIG (lines of
# config.properties, or a file under test/), then newman; the report is OUT/NAME.json.
run() {
	local name=$1 config=$2 collection=$3 data=${4:-}
	shift 4 || shift $#
	local props=$config
	if [ ! -f "$W/test/$config" ]; then
		props=$OUT/$name.properties
		printf '%b\n' "$config" >"$props"
	fi
	(cd "$W/test" && OMP_NUM_THREADS=1 exec "$TORCHD" serve --enable-snapshots=false --model-store "$W/store" --python "$PY" \
		--ts-config "$props" --grpc-address 127.0.0.1:0 --grpc-inference-address 127.0.0.1:0 \
		--grpc-management-address 127.0.0.1:0 >"$OUT/$name.torchd.log" 2>&1) &
	local pid=$!
	for _ in $(seq 100); do
		curl -fsk https://127.0.0.1:8443/ping >/dev/null 2>&1 || curl -fs http://127.0.0.1:8080/ping >/dev/null 2>&1 && break
		sleep 0.2
	done
	(cd "$W/test" && "$NEWMAN" run -e postman/environment.json "postman/$collection" ${data:+-d "postman/$data"} "$@" \
		-r cli,json --reporter-json-export "$OUT/$name.json" >"$OUT/$name.newman.log" 2>&1) || true
	kill "$pid" && wait "$pid" 2>/dev/null || true
}

base='disable_token_authorization=true\nenable_model_api=true'
# TorchServe's allowed_urls default (every URL): the re-registration row relies on it.
run management "$base\nallowed_urls=file://.*,http(s)?://.*" management_api_test_collection.json management_data.json
run inference "metrics_mode=prometheus\n$base" inference_api_test_collection.json inference_data_local.json
run explanation "metrics_mode=prometheus\n$base" explanation_api_test_collection.json explanation_data.json
run kserve_v1 "service_envelope=kserve\nmetrics_mode=prometheus\n$base" kf_api_test_collection.json kf_inference_data.json
run kserve_v2 "service_envelope=kservev2\nmetrics_mode=prometheus\n$base" kfv2_api_test_collection.json kfv2_inference_data.json
run https resources/config.properties https_test_collection.json "" --insecure
run https_kserve_v1 resources/config_kf.properties kf_https_test_collection.json "" --insecure
run https_kserve_v2 resources/config_kfv2.properties kfv2_https_test_collection.json "" --insecure

# The summary: assertions per collection, and each failure with whether it is a value.
"$PY" - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
contract = 0
for name in ("management", "inference", "explanation", "kserve_v1", "kserve_v2", "https", "https_kserve_v1", "https_kserve_v2"):
    p = os.path.join(out, name + ".json")
    if not os.path.exists(p):
        print(f"{name}: no report (see {name}.newman.log)"); contract += 1; continue
    run = json.load(open(p))["run"]
    a = run["stats"]["assertions"]
    print(f"{name}: {a['total'] - a['failed']}/{a['total']} assertions pass")
    for f in run["failures"]:
        test = f["error"].get("test", "")
        value = test.startswith("Test expected")  # the trained weights' predicted values
        contract += not value
        print(f"  {'value   ' if value else 'CONTRACT'} {f['source'].get('name', '')}: {test}: {f['error'].get('message', '')}")
print(f"contract failures: {contract}")
sys.exit(1 if contract else 0)
EOF
