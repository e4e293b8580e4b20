"""A tiny Llama in torch with vLLM's tensor-parallel fused layout, and the HF reference.

TpLlama holds one TP rank: fused `qkv_proj` (QKVParallelLinear) and `gate_up_proj`
(MergedColumnParallelLinear) column-parallel, `o_proj` / `down_proj` row-parallel (all-reduce),
a vocab-parallel embedding and LM head; the module classes carry vLLM's names and attributes, so
wtx.vllm.manifest_from_module reads them as it would read vLLM's. reference_forward runs the same
network from HF-named full tensors in one process: the trainer's view.
"""

import math

import torch
import torch.distributed as dist
from torch import nn

CONFIG = dict(vocab=64, hidden=32, heads=4, kv_heads=2, head=8, inter=48, layers=2)


class QKVParallelLinear(nn.Module):
    def __init__(self, hidden, head_size, total_num_heads, total_num_kv_heads, tp_size, dtype):
        super().__init__()
        self.head_size = head_size
        self.total_num_heads = total_num_heads
        self.total_num_kv_heads = total_num_kv_heads
        self.num_heads = total_num_heads // tp_size
        self.num_kv_heads = max(1, total_num_kv_heads // tp_size)
        rows = (self.num_heads + 2 * self.num_kv_heads) * head_size
        self.weight = nn.Parameter(torch.zeros(rows, hidden, dtype=dtype), requires_grad=False)


class MergedColumnParallelLinear(nn.Module):
    def __init__(self, hidden, output_sizes, tp_size, dtype):
        super().__init__()
        self.output_sizes = list(output_sizes)
        rows = sum(s // tp_size for s in output_sizes)
        self.weight = nn.Parameter(torch.zeros(rows, hidden, dtype=dtype), requires_grad=False)


class RowParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, tp_size, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out_features, in_features // tp_size, dtype=dtype),
                                   requires_grad=False)


class VocabParallelEmbedding(nn.Module):
    def __init__(self, vocab, hidden, tp_size, dtype):
        super().__init__()
        self.org_vocab_size = vocab
        self.num_embeddings_padded = vocab
        self.weight = nn.Parameter(torch.zeros(vocab // tp_size, hidden, dtype=dtype),
                                   requires_grad=False)


class ParallelLMHead(VocabParallelEmbedding):
    pass


class RMSNorm(nn.Module):
    def __init__(self, hidden, dtype):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(hidden, dtype=dtype), requires_grad=False)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()


def rope(x, positions):
    # x: [tokens, heads, head]
    half = x.shape[-1] // 2
    inv = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float32) / half))
    ang = positions[:, None].float() * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def attention(q, k, v, heads, kv_heads):
    # q: [T, heads, d], k/v: [T, kv_heads, d]; causal.
    rep = heads // kv_heads
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    t = q.shape[0]
    scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[-1])
    mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(t, -1)


class _Layer(nn.Module):
    def __init__(self, c, tp, dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden"], dtype)
        self.self_attn = nn.Module()
        self.self_attn.qkv_proj = QKVParallelLinear(c["hidden"], c["head"], c["heads"],
                                                    c["kv_heads"], tp, dtype)
        self.self_attn.o_proj = RowParallelLinear(c["heads"] * c["head"], c["hidden"], tp, dtype)
        self.post_attention_layernorm = RMSNorm(c["hidden"], dtype)
        self.mlp = nn.Module()
        self.mlp.gate_up_proj = MergedColumnParallelLinear(c["hidden"], [c["inter"]] * 2, tp,
                                                           dtype)
        self.mlp.down_proj = RowParallelLinear(c["inter"], c["hidden"], tp, dtype)


class TpLlama(nn.Module):
    """One TP rank of the tiny Llama; forward is collective over `group`."""

    def __init__(self, tp_size=2, tp_rank=0, group=None, dtype=torch.bfloat16, config=CONFIG):
        super().__init__()
        c = self.c = config
        self.tp_size, self.tp_rank, self.group = tp_size, tp_rank, group
        self.model = nn.Module()
        self.model.embed_tokens = VocabParallelEmbedding(c["vocab"], c["hidden"], tp_size, dtype)
        self.model.layers = nn.ModuleList(_Layer(c, tp_size, dtype) for _ in range(c["layers"]))
        self.model.norm = RMSNorm(c["hidden"], dtype)
        self.lm_head = ParallelLMHead(c["vocab"], c["hidden"], tp_size, dtype)

    def _all_reduce(self, x):
        if self.tp_size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def _all_gather_last(self, x):
        if self.tp_size == 1:
            return x
        parts = [torch.empty_like(x) for _ in range(self.tp_size)]
        dist.all_gather(parts, x.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)

    @torch.no_grad()
    def forward(self, ids):
        c, tp = self.c, self.tp_size
        per = c["vocab"] // tp
        lo = self.tp_rank * per
        local = (ids >= lo) & (ids < lo + per)
        emb = self.model.embed_tokens.weight.float()[(ids - lo).clamp(0, per - 1)]
        h = self._all_reduce(emb * local[:, None])
        pos = torch.arange(ids.shape[0])
        for layer in self.model.layers:
            a = layer.self_attn.qkv_proj
            x = rms_norm(h, layer.input_layernorm.weight)
            qkv = x @ a.weight.float().t()
            qs, ks = a.num_heads * c["head"], a.num_kv_heads * c["head"]
            q = rope(qkv[:, :qs].reshape(-1, a.num_heads, c["head"]), pos)
            k = rope(qkv[:, qs:qs + ks].reshape(-1, a.num_kv_heads, c["head"]), pos)
            v = qkv[:, qs + ks:].reshape(-1, a.num_kv_heads, c["head"])
            o = attention(q, k, v, a.num_heads, a.num_kv_heads)
            h = h + self._all_reduce(o @ layer.self_attn.o_proj.weight.float().t())
            x = rms_norm(h, layer.post_attention_layernorm.weight)
            gu = x @ layer.mlp.gate_up_proj.weight.float().t()
            half = gu.shape[-1] // 2
            m = torch.nn.functional.silu(gu[:, :half]) * gu[:, half:]
            h = h + self._all_reduce(m @ layer.mlp.down_proj.weight.float().t())
        h = rms_norm(h, self.model.norm.weight)
        return self._all_gather_last(h @ self.lm_head.weight.float().t())


def hf_weights(seed, dtype=torch.bfloat16, config=CONFIG):
    """HF-named full tensors of the tiny Llama (the trainer's weights)."""
    c = config
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=0.2):
        return (torch.randn(*shape, generator=g) * scale).to(dtype)

    w = {"model.embed_tokens.weight": rnd(c["vocab"], c["hidden"], scale=1.0),
         "model.norm.weight": (1 + rnd(c["hidden"], scale=0.1).float()).to(dtype),
         "lm_head.weight": rnd(c["vocab"], c["hidden"])}
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = (1 + rnd(c["hidden"], scale=0.1).float()).to(dtype)
        w[p + "post_attention_layernorm.weight"] = (1 + rnd(c["hidden"], scale=0.1).float()).to(dtype)
        w[p + "self_attn.q_proj.weight"] = rnd(c["heads"] * c["head"], c["hidden"])
        w[p + "self_attn.k_proj.weight"] = rnd(c["kv_heads"] * c["head"], c["hidden"])
        w[p + "self_attn.v_proj.weight"] = rnd(c["kv_heads"] * c["head"], c["hidden"])
        w[p + "self_attn.o_proj.weight"] = rnd(c["hidden"], c["heads"] * c["head"])
        w[p + "mlp.gate_proj.weight"] = rnd(c["inter"], c["hidden"])
        w[p + "mlp.up_proj.weight"] = rnd(c["inter"], c["hidden"])
        w[p + "mlp.down_proj.weight"] = rnd(c["hidden"], c["inter"])
    return w


@torch.no_grad()
def reference_forward(w, ids, config=CONFIG):
    """The trainer's forward pass from HF-named full tensors (no TP)."""
    c = config
    h = w["model.embed_tokens.weight"].float()[ids]
    pos = torch.arange(ids.shape[0])
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"])
        q = rope((x @ w[p + "self_attn.q_proj.weight"].float().t()).reshape(-1, c["heads"], c["head"]), pos)
        k = rope((x @ w[p + "self_attn.k_proj.weight"].float().t()).reshape(-1, c["kv_heads"], c["head"]), pos)
        v = (x @ w[p + "self_attn.v_proj.weight"].float().t()).reshape(-1, c["kv_heads"], c["head"])
        h = h + attention(q, k, v, c["heads"], c["kv_heads"]) @ w[p + "self_attn.o_proj.weight"].float().t()
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"])
        g = x @ w[p + "mlp.gate_proj.weight"].float().t()
        u = x @ w[p + "mlp.up_proj.weight"].float().t()
        h = h + (torch.nn.functional.silu(g) * u) @ w[p + "mlp.down_proj.weight"].float().t()
    h = rms_norm(h, w["model.norm.weight"])
    return h @ w["lm_head.weight"].float().t()
