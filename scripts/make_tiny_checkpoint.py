#!/usr/bin/python3
"""Writes a deterministic Hugging Face style safetensors checkpoint for a llama/qwen2-family
config.json (tests/conformance/models/tiny-llama by default): model-0000K-of-0000N.safetensors
shards plus model.safetensors.index.json, or one model.safetensors with --shards 1.

Values depend only on the tensor name and --seed (normal(0, 0.02), norms around 1), so the same
command always writes the same bytes. Needs numpy only (Debian's /usr/bin/python3).

  scripts/make_tiny_checkpoint.py --out /tmp/tiny-ckpt [--config C] [--shards 2] [--dtype bf16]
"""
import argparse
import json
import os
import struct
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CONFIG = os.path.join(HERE, "..", "tests", "conformance", "models", "tiny-llama",
                              "config.json")
ST_DTYPE = {"bf16": "BF16", "f16": "F16", "f32": "F32"}


def tensors_of(cfg):
    """(name, shape) of every checkpoint tensor of a llama/qwen2-family model, in file order."""
    h = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    hd = cfg.get("head_dim", h // heads)
    inter = cfg["intermediate_size"]
    vocab = cfg["vocab_size"]
    bias = cfg.get("attention_bias", cfg.get("model_type") == "qwen2")
    out = [("model.embed_tokens.weight", (vocab, h))]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out += [(p + "input_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (heads * hd, h)),
                (p + "self_attn.k_proj.weight", (kv * hd, h)),
                (p + "self_attn.v_proj.weight", (kv * hd, h))]
        if bias:
            out += [(p + "self_attn.q_proj.bias", (heads * hd,)),
                    (p + "self_attn.k_proj.bias", (kv * hd,)),
                    (p + "self_attn.v_proj.bias", (kv * hd,))]
        out += [(p + "self_attn.o_proj.weight", (h, heads * hd)),
                (p + "post_attention_layernorm.weight", (h,)),
                (p + "mlp.gate_proj.weight", (inter, h)),
                (p + "mlp.up_proj.weight", (inter, h)),
                (p + "mlp.down_proj.weight", (h, inter))]
    out.append(("model.norm.weight", (h,)))
    if not cfg.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", (vocab, h)))
    return out


def values(name, shape, seed):
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    v = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    if name.endswith("norm.weight"):
        v += np.float32(1.0)
    return v


def encode(v, dtype):
    if dtype == "f32":
        return v.astype("<f4").tobytes()
    if dtype == "f16":
        return v.astype("<f2").tobytes()
    # bf16: round to nearest even on the upper 16 bits of the f32 pattern.
    u = v.astype("<f4").view("<u4").astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2").tobytes()


def write_file(path, entries, dtype):
    header, blobs, off = {}, [], 0
    for name, shape, blob in entries:
        header[name] = {"dtype": ST_DTYPE[dtype], "shape": list(shape),
                        "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)  # keep the data 8-byte aligned, as safetensors does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--config", default=DEFAULT_CONFIG, help="config.json")
    ap.add_argument("--shards", type=int, default=2, help="number of shard files (1: no index)")
    ap.add_argument("--dtype", default="bf16", choices=sorted(ST_DTYPE))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    ts = tensors_of(cfg)
    entries = [(n, s, encode(values(n, s, a.seed), a.dtype)) for n, s in ts]
    os.makedirs(a.out, exist_ok=True)
    if a.shards <= 1:
        write_file(os.path.join(a.out, "model.safetensors"), entries, a.dtype)
        return
    per = -(-len(entries) // a.shards)
    weight_map, total = {}, 0
    for k in range(a.shards):
        part = entries[k * per:(k + 1) * per]
        fname = "model-%05d-of-%05d.safetensors" % (k + 1, a.shards)
        total += write_file(os.path.join(a.out, fname), part, a.dtype)
        for n, _, _ in part:
            weight_map[n] = fname
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2,
                  sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
