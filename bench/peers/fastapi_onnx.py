"""The plain Python ONNX baseline: onnxruntime in FastAPI on uvicorn (uvloop, httptools), no
batching, as the seed deployments' own comparison ran it.

Each request runs its own InferenceSession.run() inside the async endpoint, so runs go one at a
time with all intra-op threads. It answers the Open Inference Protocol's JSON infer request, so
that the same load generator and body drive it and torchd.

  .venv/bin/python bench/peers/fastapi_onnx.py --model models/out/onnx/mnist/model.onnx --port 8094 [--threads 2]

POST /v2/models/{name}/infer {"inputs": [{"name", "shape", "datatype", "data"}]} -> {"outputs": [...]};
GET /ping. Needs fastapi, uvicorn, uvloop, httptools and onnxruntime in the venv (make models-onnx).
"""
import argparse

import numpy as np
import onnxruntime as ort
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

app = FastAPI()
state = {}
DTYPES = {"FP32": np.float32, "INT64": np.int64, "INT32": np.int32, "FP16": np.float16, "UINT8": np.uint8,
          "INT8": np.int8, "BOOL": np.bool_, "FP64": np.float64}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


@app.get("/ping")
async def ping():
    return {"status": "Healthy"}


@app.post("/v2/models/{name}/infer")
async def infer(name: str, request: Request):
    body = await request.json()
    try:
        feeds = {i["name"]: np.asarray(i["data"], dtype=DTYPES[i["datatype"]]).reshape(i["shape"]) for i in body["inputs"]}
        outs = state["session"].run(None, feeds)
    except Exception as e:  # the client's input, as a v2 server answers it
        return JSONResponse({"error": str(e)}, status_code=400)
    return {"model_name": name, "outputs": [
        {"name": o.name, "shape": list(v.shape), "datatype": NAMES[v.dtype], "data": v.ravel().tolist()}
        for o, v in zip(state["session"].get_outputs(), outs)]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, default=8094)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads")
    a = ap.parse_args()
    o = ort.SessionOptions()
    o.intra_op_num_threads = a.threads
    o.inter_op_num_threads = 1
    state["session"] = ort.InferenceSession(a.model, o, providers=["CPUExecutionProvider"])
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", loop="uvloop", http="httptools")


if __name__ == "__main__":
    main()
