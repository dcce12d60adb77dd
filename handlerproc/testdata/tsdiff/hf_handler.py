"""A Hugging Face sequence classifier behind a BaseHandler, as TorchServe's
Huggingface_Transformers example serves one: the model and tokenizer from the archive's
directory, a batch of texts padded together, each text's label and logits out."""
import torch
from transformers import AutoModelForSequenceClassification, BertTokenizer
from ts.torch_handler.base_handler import BaseHandler


class SequenceClassifier(BaseHandler):
    def initialize(self, context):
        model_dir = context.system_properties.get("model_dir")
        self.model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
        self.tokenizer = BertTokenizer(f"{model_dir}/vocab.txt")
        self.initialized = True

    def preprocess(self, data):
        texts = []
        for d in data:
            body = d.get("data") or d.get("body")
            texts.append(body.decode("utf-8") if isinstance(body, (bytes, bytearray)) else str(body))
        return self.tokenizer(texts, padding=True, return_tensors="pt")

    def inference(self, inputs):
        with torch.inference_mode():
            return self.model(**inputs).logits

    def postprocess(self, logits):
        labels = self.model.config.id2label
        return [{"label": labels[int(r.argmax())], "logits": r.tolist()} for r in logits]
