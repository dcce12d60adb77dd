"""The plain Python baseline: FastAPI on uvicorn (uvloop, httptools), no batching.

Each request is decoded, run through its own forward and answered inside the async
endpoint, so forwards run one at a time with all intra-op threads, which is how a plain
FastAPI model service is usually written.

  /usr/bin/python3 bench/peers/fastapi_plain.py --port 8091 [--threads 2]

POST /predictions/{resnet18,digits,digits_tensor} with the raw body; GET /ping.
"""
import argparse

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

import zoo

app = FastAPI()
models = {}


@app.get("/ping")
async def ping():
    return {"status": "Healthy"}


@app.post("/predictions/{name}")
async def predict(name: str, request: Request):
    m = models.get(name)
    if m is None:
        return JSONResponse({"code": 404, "message": "Model not found: " + name}, status_code=404)
    body = await request.body()
    try:
        x = m.preprocess(body)
    except Exception as e:
        return JSONResponse({"code": 400, "message": str(e)}, status_code=400)
    ctype, out = m.postprocess(m.forward(x))
    return Response(content=out, media_type=ctype)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8091)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads")
    a = ap.parse_args()
    zoo.set_threads(a.threads, interop=True)
    models.update(zoo.load_models())
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False,
                loop="uvloop", http="httptools", backlog=4096)


if __name__ == "__main__":
    main()
