"""Triton's and TorchServe's own Python gRPC clients against a running torchd.

Run by TestGRPCPeerClients (grpc_peers_test.go) with the build/pyclients venv: tritonclient
calls every call torchd serves on the Open Inference Protocol's port; TorchServe's stubs,
generated here from proto/torchserve with grpcio-tools, call the inference and management
APIs. Outputs are compared with the REST API's for the same input. Exits non-zero on the
first failure.
"""
import argparse
import json
import os
import subprocess
import sys
import urllib.request

import grpc
import numpy as np
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

p = argparse.ArgumentParser()
p.add_argument("--grpc", required=True)
p.add_argument("--ts-inference", required=True)
p.add_argument("--ts-management", required=True)
p.add_argument("--rest", required=True, help="the inference API's base URL")
p.add_argument("--protos", required=True, help="proto/ of the repository")
p.add_argument("--out", required=True, help="a directory for the generated stubs")
p.add_argument("--image", required=True, help="a PNG for the digits model")
p.add_argument("--input", required=True, help="an .npy input for digits_tensor")
args = p.parse_args()


def check(cond, what):
    if not cond:
        sys.exit("FAIL: " + what)
    print("ok:", what)


def status_of(fn):
    try:
        fn()
    except InferenceServerException as e:
        return e.status(), e.message()
    return None, None


def rest_v2(model, x):
    body = json.dumps({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": list(x.shape), "data": x.flatten().tolist()}]})
    req = urllib.request.Request(args.rest + "/v2/models/" + model + "/infer", data=body.encode(), headers={"Content-Type": "application/json"})
    out = json.load(urllib.request.urlopen(req))["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


# Triton's client.
c = tg.InferenceServerClient(args.grpc)
check(c.is_server_live(), "is_server_live")
check(c.is_server_ready(), "is_server_ready")
check(c.is_model_ready("digits_tensor"), "is_model_ready")
check(not c.is_model_ready("nope"), "is_model_ready of an unknown model is false")
check(c.get_server_metadata().name == "torchd", "get_server_metadata")
md = c.get_model_metadata("digits_tensor", as_json=True)
check(md["inputs"][0]["name"] == "input__0" and md["inputs"][0]["shape"] == ["-1", "1", "28", "28"], "get_model_metadata")
cfg = c.get_model_config("digits_tensor", as_json=True)["config"]
check(cfg["max_batch_size"] > 0 and cfg["input"][0]["dims"] == ["1", "28", "28"], "get_model_config")

x = np.load(args.input).astype(np.float32)
want = rest_v2("digits_tensor", x)
inp = tg.InferInput("input__0", list(x.shape), "FP32")
inp.set_data_from_numpy(x)
r = c.infer("digits_tensor", [inp], outputs=[tg.InferRequestedOutput("output__0")])
got = r.as_numpy("output__0")
check(got.shape == want.shape and np.allclose(got, want, atol=1e-5), "infer (raw contents) equals REST v2")

# The stream: answers in order, an error on its own answer.
answers = []
c.start_stream(callback=lambda result, error: answers.append((result, error)))
for i in range(4):
    shape = list(x.shape) if i != 2 else [x.shape[0], 1, 28, 27]
    data = x if i != 2 else x[..., :27].copy()
    si = tg.InferInput("input__0", shape, "FP32")
    si.set_data_from_numpy(data)
    c.async_stream_infer("digits_tensor", [si], request_id=str(i))
c.stop_stream()
check(len(answers) == 4, "stream: four answers")
for i, (result, error) in enumerate(answers):
    if i == 2:
        check(error is not None and "must have shape" in error.message(), "stream: the bad request's error")
    else:
        check(error is None and result.get_response().id == str(i) and np.allclose(result.as_numpy("output__0"), want, atol=1e-5), "stream answer %d in order" % i)

st = c.get_inference_statistics("digits_tensor", as_json=True)["model_stats"][0]
check(int(st["inference_stats"]["success"]["count"]) >= 4, "get_inference_statistics")

code, msg = status_of(lambda: c.infer("nope", [inp]))
check(code == "StatusCode.NOT_FOUND", "infer of an unknown model: " + str(code))
bad = tg.InferInput("input__0", [4, 1, 28, 27], "FP32")
bad.set_data_from_numpy(x[..., :27].copy())
code, msg = status_of(lambda: c.infer("digits_tensor", [bad]))
check(code == "StatusCode.INVALID_ARGUMENT" and "must have shape" in msg, "infer with a wrong shape: " + str(code))
code, _ = status_of(lambda: c.get_model_metadata("nope"))
check(code == "StatusCode.NOT_FOUND", "get_model_metadata of an unknown model")

index = c.get_model_repository_index(as_json=True)["models"]
check(any(m["name"] == "digits_tensor" and m.get("state") == "READY" for m in index), "get_model_repository_index")
c.unload_model("digits")
check(not c.is_model_ready("digits"), "unload_model")
c.load_model("digits")
check(c.is_model_ready("digits"), "load_model")
code, _ = status_of(lambda: c.load_model("nope"))
check(code == "StatusCode.NOT_FOUND", "load_model of a model not in the store: " + str(code))
c.close()

# TorchServe's stubs, generated from our protos.
subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", os.path.join(args.protos, "torchserve"), "-I", args.protos,
                "--python_out", args.out, "--grpc_python_out", args.out, "inference.proto", "management.proto"], check=True)
sys.path.insert(0, args.out)
import inference_pb2, inference_pb2_grpc, management_pb2, management_pb2_grpc  # noqa: E402
from google.protobuf import empty_pb2  # noqa: E402

inf = inference_pb2_grpc.InferenceAPIsServiceStub(grpc.insecure_channel(args.ts_inference))
ping = json.loads(inf.Ping(empty_pb2.Empty()).health)
check(ping["status"] == "Healthy", "Ping")
png = open(args.image, "rb").read()
rest = urllib.request.urlopen(urllib.request.Request(args.rest + "/predictions/digits", data=png, headers={"Content-Type": "image/png"})).read()
pred = inf.Predictions(inference_pb2.PredictionsRequest(model_name="digits", input={"data": png})).prediction
check(pred == rest, "Predictions equals REST /predictions")
streamed = [m.prediction for m in inf.StreamPredictions(inference_pb2.PredictionsRequest(model_name="digits", input={"data": png}))]
check(streamed == [rest], "StreamPredictions")
try:
    inf.Predictions(inference_pb2.PredictionsRequest(model_name="nope", input={"data": png}))
    check(False, "Predictions of an unknown model")
except grpc.RpcError as e:
    check(e.code() == grpc.StatusCode.NOT_FOUND, "Predictions of an unknown model: NOT_FOUND")

mgmt = management_pb2_grpc.ManagementAPIsServiceStub(grpc.insecure_channel(args.ts_management))
models = json.loads(mgmt.ListModels(management_pb2.ListModelsRequest()).msg)["models"]
check(any(m["modelName"] == "digits" for m in models), "ListModels")
msg = json.loads(mgmt.RegisterModel(management_pb2.RegisterModelRequest(url="digits_tensor.mar", model_name="py_dt", initial_workers=1, synchronous=True)).msg)
check("registered with 1 initial workers" in msg["status"], "RegisterModel")
msg = json.loads(mgmt.ScaleWorker(management_pb2.ScaleWorkerRequest(model_name="py_dt", min_worker=2, synchronous=True)).msg)
check("Workers scaled to 2" in msg["status"], "ScaleWorker")
desc = json.loads(mgmt.DescribeModel(management_pb2.DescribeModelRequest(model_name="py_dt")).msg)
check(desc[0]["modelName"] == "py_dt" and len(desc[0]["workers"]) == 2, "DescribeModel")
msg = json.loads(mgmt.SetDefault(management_pb2.SetDefaultRequest(model_name="py_dt", model_version="1.0")).msg)
check("Default version successfully updated" in msg["status"], "SetDefault")
msg = json.loads(mgmt.UnregisterModel(management_pb2.UnregisterModelRequest(model_name="py_dt")).msg)
check("unregistered" in msg["status"], "UnregisterModel")
try:
    mgmt.UnregisterModel(management_pb2.UnregisterModelRequest(model_name="py_dt"))
    check(False, "UnregisterModel of an unknown model")
except grpc.RpcError as e:
    check(e.code() == grpc.StatusCode.NOT_FOUND, "UnregisterModel of an unknown model: NOT_FOUND")
print("PASS")
