"""A Python backend model written to Triton's contract, which misbehaves on request: the
first element of X picks what execute does with the whole batch (0: answer)."""
import json
import os
import sys
import time

import numpy as np

import triton_python_backend_utils as pb_utils

import helper  # beside model.py in 1/: the version's directory is on the path


def threads():
    """torch's intra-op threads, where the worker imported torch (0 where not)."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch else 0


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
        return auto_complete_model_config

    def initialize(self, args):
        self.args = args
        config = json.loads(args["model_config"])
        self.scale = float(config["parameters"]["SCALE"]["string_value"])
        self.y_type = pb_utils.triton_string_to_numpy(pb_utils.get_output_config_by_name(config, "Y")["data_type"])
        pb_utils.Logger.log_info(f"initialized {args['model_instance_name']}")

    def execute(self, requests):
        modes = [int(pb_utils.get_input_tensor_by_name(r, "X").as_numpy().reshape(-1)[0]) for r in requests]
        if -1 in modes:
            raise ValueError("asked to raise")
        if -2 in modes:
            return [pb_utils.InferenceResponse([]) for _ in range(len(requests) + 1)]
        if -4 in modes:
            time.sleep(3600)
        if -7 in modes:
            os._exit(3)
        if -8 in modes:
            pb_utils.InferenceRequest(model_name="other", inputs=[], requested_output_names=["Y"]).exec()
        responses = []
        for r, mode in zip(requests, modes):
            if mode == -3:
                responses.append({"Y": 1})
                continue
            if mode == -5:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("X is negative", pb_utils.TritonError.INVALID_ARG)))
                continue
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            s = pb_utils.get_input_tensor_by_name(r, "S").as_numpy()
            y = (x * self.scale).astype(np.float64 if mode == -6 else self.y_type)
            info = json.dumps({k: self.args[k] for k in self.args if k != "model_config"} | {"batch": len(requests), "id": r.request_id(), "threads": threads()})
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("Y", y),
                pb_utils.Tensor("U", np.array([[helper.upper(v)] for v in s.reshape(-1)], dtype=np.object_)),
                pb_utils.Tensor("INFO", np.array([[info.encode()]] * x.shape[0], dtype=np.object_)),
            ]))
        return responses
