"""torchd's triton_python_backend_utils: the API a Triton Python backend model.py uses.

torchd runs model.py in a handler process (TorchServe's worker) through torchd_triton_adapter;
this module is what `import triton_python_backend_utils as pb_utils` finds there. It is torchd's
own implementation of Triton's documented API, over numpy arrays. BLS (InferenceRequest.exec)
is refused: a model.py cannot call back into torchd's models.
"""
import json
import sys

import numpy as np

_TYPES = {
    "TYPE_BOOL": np.bool_, "TYPE_UINT8": np.uint8, "TYPE_UINT16": np.uint16, "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64, "TYPE_INT8": np.int8, "TYPE_INT16": np.int16, "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64, "TYPE_FP16": np.float16, "TYPE_FP32": np.float32, "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


def triton_string_to_numpy(triton_type_string):
    """The numpy type of a config's data_type ("TYPE_FP32" -> np.float32)."""
    return _TYPES.get(triton_type_string)


def triton_to_numpy_type(data_type):
    """The numpy type of a protocol datatype ("FP32", or a config's "TYPE_FP32")."""
    if isinstance(data_type, str) and not data_type.startswith("TYPE_"):
        data_type = "TYPE_" + ("STRING" if data_type == "BYTES" else data_type)
    return _TYPES.get(data_type)


def numpy_to_triton_type(data_type):
    """The protocol datatype of a numpy type (np.float32 -> "FP32"; bytes and objects -> "BYTES")."""
    dt = np.dtype(data_type)
    if dt == np.object_ or dt.kind in ("S", "U"):
        return "BYTES"
    for name, t in _TYPES.items():
        if t is not np.object_ and np.dtype(t) == dt:
            return name[len("TYPE_"):]
    return None


def serialize_byte_tensor(input_tensor):
    """Triton's BYTES layout of an array of bytes or str: each element a 4-byte little-endian
    length and its bytes, in row-major order."""
    out = bytearray()
    for v in np.asarray(input_tensor, dtype=np.object_).reshape(-1):
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif not isinstance(v, (bytes, bytearray)):
            v = str(v).encode("utf-8")
        out += len(v).to_bytes(4, "little") + bytes(v)
    return np.frombuffer(bytes(out), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor):
    """The elements of Triton's BYTES layout, as a 1-D object array of bytes."""
    buf = memoryview(bytes(encoded_tensor))
    items, at = [], 0
    while at < len(buf):
        if at + 4 > len(buf):
            raise ValueError("a string element is cut short")
        n = int.from_bytes(buf[at:at + 4], "little")
        at += 4
        if at + n > len(buf):
            raise ValueError("a string element's length runs past the data")
        items.append(bytes(buf[at:at + n]))
        at += n
    arr = np.empty(len(items), dtype=np.object_)
    arr[:] = items
    return arr


class TritonError(Exception):
    """An error a model answers a request with: InferenceResponse(error=TritonError(...))."""
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message, code=None):
        super().__init__(message)
        self._message = str(message)
        self._code = TritonError.INTERNAL if code is None else code

    def message(self):
        return self._message

    def code(self):
        return self._code


class TritonModelException(Exception):
    """What Triton raises into a model for a failed call; a model may raise it too."""

    def message(self):
        return str(self)


class Tensor:
    """A named tensor over a numpy array. TYPE_STRING tensors are object arrays of bytes."""

    def __init__(self, name, data, dtype=None):
        if not isinstance(data, np.ndarray):
            raise TritonModelException(
                f"Tensor {name!r}: the data must be a numpy array, got {type(data).__name__}")
        if data.dtype.kind in ("S", "U"):
            data = data.astype(np.object_)
        self._name = name
        self._data = data

    def name(self):
        return self._name

    def as_numpy(self):
        return self._data

    def triton_dtype(self):
        return numpy_to_triton_type(self._data.dtype)

    def shape(self):
        return list(self._data.shape)

    def is_cpu(self):
        return True

    @staticmethod
    def from_dlpack(name, capsule):
        raise TritonModelException("Tensor.from_dlpack is not supported by torchd's Python backend; build the Tensor from a numpy array")

    def to_dlpack(self):
        raise TritonModelException("Tensor.to_dlpack is not supported by torchd's Python backend; use as_numpy()")


class InferenceRequest:
    """A request execute receives. Built by model code, it would be a BLS call, which torchd refuses."""

    def __init__(self, model_name=None, inputs=None, requested_output_names=None, request_id="",
                 parameters=None, model_version=-1, **kwargs):
        self._model_name = model_name
        self._inputs = list(inputs or [])
        self._outputs = list(requested_output_names or [])
        self._id = request_id
        if isinstance(parameters, dict):
            parameters = json.dumps(parameters)
        self._parameters = parameters or "{}"

    def request_id(self):
        return self._id

    def correlation_id(self):
        return 0

    def flags(self):
        return 0

    def parameters(self):
        """The request's parameters, as a JSON string (as Triton gives them)."""
        return self._parameters

    def requested_output_names(self):
        return list(self._outputs)

    def inputs(self):
        return list(self._inputs)

    def model_name(self):
        return self._model_name

    def is_cancelled(self):
        return False

    def get_response_sender(self):
        raise TritonModelException("decoupled models (response senders) are not supported by torchd's Python backend")

    def exec(self, *args, **kwargs):
        raise TritonModelException(
            "BLS (InferenceRequest.exec) is not supported by torchd's Python backend: a model.py cannot call "
            "other models; chain them in an ensemble (platform: \"ensemble\") instead")

    def async_exec(self, *args, **kwargs):
        return self.exec()

    def stream_exec(self, *args, **kwargs):
        return self.exec()


class InferenceResponse:
    """The answer to one request: its output tensors, or an error."""

    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._outputs = list(output_tensors or [])
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._error = error

    def output_tensors(self):
        return list(self._outputs)

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error


def get_input_tensor_by_name(inference_request, name):
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response, name):
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def _by_name(model_config, key, name):
    for c in model_config.get(key, []) or []:
        if c.get("name") == name:
            return c
    return None


def get_input_config_by_name(model_config, name):
    return _by_name(model_config, "input", name)


def get_output_config_by_name(model_config, name):
    return _by_name(model_config, "output", name)


class LogLevel:
    INFO, WARNING, ERROR, VERBOSE = range(4)


class Logger:
    """Log lines go to stderr, which torchd logs with the model's name."""
    _names = {LogLevel.INFO: "INFO", LogLevel.WARNING: "WARNING", LogLevel.ERROR: "ERROR", LogLevel.VERBOSE: "VERBOSE"}

    @staticmethod
    def log(message, level=LogLevel.INFO):
        print(f"{Logger._names.get(level, 'INFO')}: {message}", file=sys.stderr, flush=True)

    @staticmethod
    def log_info(message):
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, LogLevel.VERBOSE)


class ModelConfig:
    """The config auto_complete_config receives. torchd checks what the model asks for against
    config.pbtxt, which it does not rewrite: an input or output the model adds must be declared
    there already, with the same type."""

    def __init__(self, model_config):
        self._config = model_config

    def as_dict(self):
        return self._config

    def max_batch_size(self):
        return self._config.get("max_batch_size", 0)

    def set_max_batch_size(self, max_batch_size):
        if max_batch_size != self.max_batch_size():
            raise TritonModelException(
                f"auto_complete_config sets max_batch_size {max_batch_size}, config.pbtxt has {self.max_batch_size()}: "
                "torchd does not rewrite config.pbtxt, set it there")
        return self

    def set_dynamic_batching(self):
        return self

    def set_model_transaction_policy(self, transaction_policy_dict):
        if transaction_policy_dict.get("decoupled"):
            raise TritonModelException("decoupled models are not supported by torchd's Python backend")
        return self

    def _add(self, key, spec):
        name = spec.get("name")
        have = _by_name(self._config, key, name)
        if have is None:
            raise TritonModelException(
                f"auto_complete_config adds {key} {name!r}, which config.pbtxt does not declare: "
                "torchd does not rewrite config.pbtxt, declare it there")
        dt = spec.get("data_type")
        if dt and dt != have.get("data_type"):
            raise TritonModelException(
                f"auto_complete_config gives {key} {name!r} type {dt}, config.pbtxt declares {have.get('data_type')}")
        return self

    def add_input(self, input):
        return self._add("input", input)

    def add_output(self, output):
        return self._add("output", output)
