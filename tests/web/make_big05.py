#!/usr/bin/env python3
"""Writes a random llama of Qwen2.5-0.5B's sizes for the page's big-GGUF measurement
(tests/web/e2e.cjs, WEB_E2E_ONLY=big-gguf; never in CI, never committed): config.json from
transformers' LlamaConfig, model.safetensors in BF16 (normal, std 0.02 as transformers
initializes; norms 1), and a word-level tokenizer.json (tokens t0..t151935, split on spaces; a
byte-level BPE like Qwen2's is not made offline). eos is unset so decoding never stops.
Needs transformers (no torch: the weights come from numpy), numpy and tokenizers.
Usage: make_big05.py DIR   (then: kernels quantize --model DIR --to q4_k --out DIR-q4k/model.gguf)"""
import json, os, struct, sys

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig

d = sys.argv[1]
os.makedirs(d, exist_ok=True)
cfg = LlamaConfig(
    vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
    num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
    max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    torch_dtype="bfloat16", bos_token_id=None, eos_token_id=None,
)
cfg.to_json_file(os.path.join(d, "config.json"))
h, i, kv = 896, 4864, 2 * 64
shapes = {"model.embed_tokens.weight": (151936, h), "model.norm.weight": (h,)}
for l in range(24):
    p = f"model.layers.{l}."
    shapes.update({
        p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
        p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
        p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
        p + "mlp.down_proj.weight": (h, i),
        p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
    })
header, offset = {}, 0
for name, shape in sorted(shapes.items()):
    n = int(np.prod(shape)) * 2
    header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
    offset += n
hjson = json.dumps(header).encode()
hjson += b" " * (-len(hjson) % 8)
rng = np.random.default_rng(0)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hjson)) + hjson)
    for name, shape in sorted(shapes.items()):
        if len(shape) == 1:
            x = np.ones(shape, np.float32)
        else:
            x = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        # f32 -> bf16, round to nearest even.
        u = x.view(np.uint32)
        b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
        f.write(b.tobytes())
params = sum(int(np.prod(s)) for s in shapes.values())
vocab = {f"t{k}": k for k in range(151936)}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.save(os.path.join(d, "tokenizer.json"))
print(f"wrote {d}: {params:,} parameters, {offset / 1e6:.0f} MB of BF16")
