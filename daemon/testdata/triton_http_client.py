#!/usr/bin/env python3
"""Drives torchd serving a Triton model repository with Triton's own HTTP client
(tritonclient[http], pinned in the Makefile), as daemon/triton_client_test.go runs it.

The repository holds "digits" (loaded at start, max_batch_size 8, INPUT__0 / OUTPUT__0) and
"other" (the same model, not loaded: explicit model control). The model store's
digits_tensor archive is registered too: its TorchServe-API answers are what the repository
model must answer.

Usage: triton_http_client.py HOST:PORT
Exits 0 when every assertion holds; a failed assertion raises.
"""
import json
import sys
import urllib.request

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def torchserve_answer(url, x):
    """The digits_tensor archive's answer for one [1, 28, 28] input, through /predictions."""
    body = json.dumps({"data": x.reshape(-1).tolist(), "shape": [1, 1, 28, 28]}).encode()
    req = urllib.request.Request(f"http://{url}/predictions/digits_tensor", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as resp:
        out = json.load(resp)
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def infer(client, model, x, binary):
    inp = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=binary)
    out = httpclient.InferRequestedOutput("OUTPUT__0", binary_data=binary)
    return client.infer(model, [inp], outputs=[out]).as_numpy("OUTPUT__0")


def main():
    url = sys.argv[1]
    client = httpclient.InferenceServerClient(url=url)
    assert client.is_server_live() and client.is_server_ready()
    # "statistics" is advertised only while every version is an integer: the digits_tensor
    # archive's is "1.0" (the statistics themselves are served either way, asserted below).
    meta = client.get_server_metadata()
    for ext in ("model_repository", "logging", "binary_tensor_data", "model_configuration"):
        assert ext in meta["extensions"], meta

    # Metadata and config show config.pbtxt's names, types and dims.
    md = client.get_model_metadata("digits")
    assert md["platform"] == "pytorch_libtorch", md
    assert md["inputs"] == [{"name": "INPUT__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}], md
    assert md["outputs"] == [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 10]}], md
    cfg = client.get_model_config("digits")
    assert cfg["max_batch_size"] == 8 and cfg["input"][0]["dims"] == [1, 28, 28], cfg

    # Inference, binary (the client's default) and JSON, equals the TorchServe API's.
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, size=(3, 1, 28, 28)).astype(np.float32)
    want = np.concatenate([torchserve_answer(url, x[i]) for i in range(3)])
    for binary in (True, False):
        got = infer(client, "digits", x, binary)
        assert got.shape == (3, 10), got.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    # Statistics count the two requests of three items.
    stats = client.get_inference_statistics("digits")["model_stats"]
    assert len(stats) == 1 and stats[0]["name"] == "digits" and stats[0]["version"] == "1", stats
    st = stats[0]
    assert st["inference_count"] == 6, st
    assert st["inference_stats"]["success"]["count"] == 2, st
    assert st["inference_stats"]["compute_infer"]["ns"] > 0, st
    assert st["batch_stats"] and st["last_inference"] > 0, st

    # The repository: "other" is there, not loaded; load it, infer, unload it.
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["digits"]["state"] == "READY" and "state" not in index["other"], index
    assert not client.is_model_ready("other")
    client.load_model("other")
    assert client.is_model_ready("other")
    np.testing.assert_allclose(infer(client, "other", x, True), want, rtol=1e-5, atol=1e-5)
    client.unload_model("other")
    assert not client.is_model_ready("other")
    try:
        infer(client, "other", x, True)
        raise AssertionError("an unloaded model answered")
    except InferenceServerException as e:
        assert "not found" in str(e).lower(), e

    # A load with a config override.
    override = dict(cfg, max_batch_size=2)
    client.load_model("digits", config=json.dumps(override))
    assert client.get_model_config("digits")["max_batch_size"] == 2
    try:
        infer(client, "digits", x, True)
        raise AssertionError("a batch of 3 passed max_batch_size 2")
    except InferenceServerException as e:
        assert "batch-size must be" in str(e), e

    # Logging.
    settings = client.get_log_settings()
    assert settings["log_info"] is True and settings["log_verbose_level"] == 0, settings
    settings = client.update_log_settings({"log_verbose_level": 1})
    assert settings["log_verbose_level"] == 1, settings
    print("tritonclient: all assertions hold")


if __name__ == "__main__":
    main()
