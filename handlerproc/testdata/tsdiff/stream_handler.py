"""A streaming handler: three parts per request through send_intermediate_predict_response,
then the last one, as TorchServe's streaming examples answer."""
from ts.handler_utils.utils import send_intermediate_predict_response
from ts.torch_handler.base_handler import BaseHandler


class StreamHandler(BaseHandler):
    def initialize(self, context):
        self.context = context
        self.initialized = True

    def preprocess(self, data):
        texts = []
        for d in data:
            body = d.get("data") or d.get("body")
            texts.append(body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else str(body))
        return texts

    def inference(self, texts):
        for i in range(3):
            send_intermediate_predict_response([f"{t}[{i}] " for t in texts], self.context.request_ids,
                                               "Intermediate Prediction success", 200, self.context)
        return [f"{t}[end]" for t in texts]

    def postprocess(self, out):
        return out
