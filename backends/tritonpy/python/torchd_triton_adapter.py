"""torchd's adapter from TorchServe's handler contract to Triton's Python backend contract.

TorchServe's worker calls handle(None, context) once at load and handle(batch, context) per
batch. At load this imports the version's model.py, calls TritonPythonModel's
auto_complete_config (checked against config.pbtxt) and initialize(args) with the keys Triton
passes; per batch it decodes each request (backends/tritonpy/wire.go's layout), calls execute
once with the whole batch, as Triton does, and encodes each response or its error. Nothing a
model does here raises out of handle: a bad answer becomes that request's error.
"""
import atexit
import fcntl
import importlib.util
import json
import os
import sys
import traceback

import numpy as np

import triton_python_backend_utils as pb_utils

_model = None


class LoadError(Exception):
    """Why model.py could not load. TorchServe's worker answers a RuntimeError at load with
    "Unknown exception" and lets any other one end the process with its traceback, whose last
    line torchd reports: so every load error leaves as this one, named without its module."""


LoadError.__module__ = "builtins"


def handle(data, context):
    global _model
    if data is None:
        try:
            _model = _Model(os.environ["TORCHD_TRITON_ARGS"])
        except LoadError:
            raise
        except BaseException as e:  # noqa: BLE001 (reported as the load's reason)
            traceback.print_exc(file=sys.stderr)
            raise LoadError(f"{type(e).__name__}: {e}") from None
        return None
    return _model.run(data)


def _instance_index(lock_dir):
    """The lowest instance index no live process of the model holds: a restarted process takes
    the index of the one it replaces. The lock is held for the process's life."""
    i = 0
    while True:
        f = open(os.path.join(lock_dir, f"instance.{i}.lock"), "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            i += 1
            continue
        _instance_index.held = f
        return i


class _Model:
    def __init__(self, args_path):
        with open(args_path) as f:
            a = json.load(f)
        self.config = json.loads(a["model_config"])
        self.name = a["model_name"]
        self.outputs = {o["name"]: o.get("data_type", "") for o in self.config.get("output", [])}
        self.output_names = [o["name"] for o in self.config.get("output", [])]
        version_dir = os.path.join(a["model_repository"], a["model_version"])
        if version_dir not in sys.path:
            sys.path.insert(0, version_dir)
        spec = importlib.util.spec_from_file_location("model", a["model_file"])
        module = importlib.util.module_from_spec(spec)
        sys.modules["model"] = module
        spec.loader.exec_module(module)
        cls = getattr(module, "TritonPythonModel", None)
        if cls is None:
            raise LoadError(f"{os.path.basename(a['model_file'])} defines no class TritonPythonModel")
        if not callable(getattr(cls, "execute", None)):
            raise LoadError("TritonPythonModel has no execute(requests) method")
        if hasattr(cls, "auto_complete_config"):
            got = cls.auto_complete_config(pb_utils.ModelConfig(self.config))
            if got is not None and not isinstance(got, pb_utils.ModelConfig):
                raise LoadError(f"auto_complete_config returned {_what(got)}, not the config it was given")
        self.model = cls()
        instance = _instance_index(a["lock_dir"])
        if hasattr(self.model, "initialize"):
            self.model.initialize({
                "model_config": a["model_config"],
                "model_instance_kind": a.get("instance_kind", "CPU"),
                "model_instance_name": f"{self.name}_0_{instance}",
                "model_instance_device_id": a.get("device_id", "0"),
                "model_repository": a["model_repository"],
                "model_version": a["model_version"],
                "model_name": self.name,
            })
        if hasattr(self.model, "finalize"):
            atexit.register(self.model.finalize)

    def run(self, batch):
        replies = [None] * len(batch)
        requests, at = [], []
        for i, item in enumerate(batch):
            body = item.get("body") if isinstance(item, dict) else None
            if body is None and isinstance(item, dict):
                body = item.get("data")
            try:
                requests.append(_decode_request(body, self.output_names))
                at.append(i)
            except Exception as e:  # noqa: BLE001 (a malformed request fails alone)
                replies[i] = _error(f"the request could not be read: {e}", pb_utils.TritonError.INVALID_ARG)
        if requests:
            for i, r in zip(at, self._execute(requests)):
                replies[i] = r
        return replies

    def _execute(self, requests):
        n = len(requests)
        try:
            responses = self.model.execute(requests)
        except Exception as e:  # noqa: BLE001 (the model's error is its requests' answer)
            traceback.print_exc(file=sys.stderr)
            return [_error(f"execute raised {type(e).__name__}: {e}")] * n
        if not isinstance(responses, (list, tuple)) or len(responses) != n:
            msg = (f"execute returned {_what(responses)}; Triton's contract is a list of {n} "
                   f"pb_utils.InferenceResponse, one per request")
            return [_error(msg)] * n
        return [self._encode(i, r) for i, r in enumerate(responses)]

    def _encode(self, i, response):
        if not isinstance(response, pb_utils.InferenceResponse):
            return _error(f"execute's response {i} is {_what(response)}, not a pb_utils.InferenceResponse")
        if response.has_error():
            e = response.error()
            return _error(e.message(), e.code())
        try:
            tensors = []
            for t in response.output_tensors():
                if not isinstance(t, pb_utils.Tensor):
                    raise LoadError(f"an output tensor is {_what(t)}, not a pb_utils.Tensor")
                if t.name() not in self.outputs:
                    raise LoadError(f"output {t.name()!r} is not an output of the config (it has {', '.join(self.output_names)})")
                want = self.outputs[t.name()]
                got = pb_utils.numpy_to_triton_type(t.as_numpy().dtype)
                if got is None or ("TYPE_" + ("STRING" if got == "BYTES" else got)) != want:
                    raise LoadError(f"output {t.name()!r} is of numpy type {t.as_numpy().dtype}, the config declares {want}")
                tensors.append((t.name(), got, t.as_numpy()))
            return _encode_tensors(tensors)
        except Exception as e:  # noqa: BLE001
            return _error(f"execute's response {i}: {e}")


def _what(v):
    if v is None:
        return "None"
    if isinstance(v, (list, tuple)):
        return f"a {type(v).__name__} of {len(v)} items"
    return f"a {type(v).__module__ + '.' if type(v).__module__ not in ('builtins',) else ''}{type(v).__name__}"


def _frame(header, region=b""):
    h = json.dumps(header).encode("utf-8")
    return len(h).to_bytes(4, "little") + h + bytes(region)


_CODES = {v: k for k, v in vars(pb_utils.TritonError).items() if k.isupper() and isinstance(v, int)}


def _error(message, code=None):
    return _frame({"error": str(message), "code": _CODES.get(code, "INTERNAL")})


def _decode_request(body, output_names):
    if body is None:
        raise LoadError("no body")
    buf = memoryview(body)
    if len(buf) < 4:
        raise LoadError("shorter than its header's length")
    n = int.from_bytes(buf[:4], "little")
    if 4 + n > len(buf):
        raise LoadError("its header runs past the data")
    header = json.loads(bytes(buf[4:4 + n]))
    region = bytearray(buf[4 + n:])  # writable, as Triton's input arrays are
    inputs = []
    for t in header.get("inputs", []):
        off, size, shape, dt = t["offset"], t["size"], t["shape"], t["datatype"]
        if off < 0 or size < 0 or off + size > len(region):
            raise LoadError(f"input {t['name']!r} runs past the data")
        if dt == "BYTES":
            arr = pb_utils.deserialize_bytes_tensor(region[off:off + size]).reshape(shape)
        else:
            np_type = pb_utils.triton_to_numpy_type(dt)
            if np_type is None:
                raise LoadError(f"input {t['name']!r}: datatype {dt} is not one torchd sends")
            arr = np.frombuffer(region, dtype=np_type, count=size // np.dtype(np_type).itemsize, offset=off).reshape(shape)
        inputs.append(pb_utils.Tensor(t["name"], arr))
    return pb_utils.InferenceRequest(inputs=inputs, request_id=header.get("id", ""),
                                     requested_output_names=header.get("outputs") or output_names,
                                     parameters=json.dumps(header.get("parameters") or {}))


def _encode_tensors(tensors):
    outs, region = [], bytearray()
    for name, dt, arr in tensors:
        if dt == "BYTES":
            data = pb_utils.serialize_byte_tensor(arr).tobytes()
        else:
            data = np.ascontiguousarray(arr).tobytes()
        region += b"\0" * (-len(region) % 8)  # each tensor 8-byte aligned, for Go's readers
        outs.append({"name": name, "datatype": dt, "shape": list(arr.shape), "offset": len(region), "size": len(data)})
        region += data
    return _frame({"outputs": outs}, region)
