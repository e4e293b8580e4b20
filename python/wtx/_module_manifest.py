"""A rank's manifest from a live torch.nn.Module with vLLM's (and SGLang's, which shares it)
fused tensor-parallel layout: QKVParallelLinear, MergedColumnParallelLinear,
Column/RowParallelLinear, VocabParallelEmbedding / ParallelLMHead sharded, everything else
replicated, the fusions named by the model's `stacked_params_mapping`. Used by wtx.vllm and
wtx.sglang; no engine needed."""

import json
import re

from . import Error, Manifest


LLAMA_STACKED_PARAMS_MAPPING = [
    (".qkv_proj", ".q_proj", "q"),
    (".qkv_proj", ".k_proj", "k"),
    (".qkv_proj", ".v_proj", "v"),
    (".gate_up_proj", ".gate_proj", 0),
    (".gate_up_proj", ".up_proj", 1),
]


_DTYPES = {
    "torch.float32": "f32", "torch.bfloat16": "bf16", "torch.float16": "f16",
    "torch.float8_e4m3fn": "fp8_e4m3", "torch.int8": "i8", "torch.uint8": "u8",
    "torch.int32": "i32",
}


def _box(rows, rest):
    return [list(rows)] + [[0, n] for n in rest]


def _split(name):
    owner, _, leaf = name.rpartition(".")
    return owner, leaf


def _module_of(name):
    """Modules as the HF manifests group them: per decoder layer `...layers.N.self_attn` (with
    input_layernorm) and `...layers.N.mlp` (with post_attention_layernorm); elsewhere the
    owning module (`model.embed_tokens`, ...); the final norm goes with `lm_head`."""
    m = re.match(r"^(.*?\.layers\.\d+)\.([^.]+)", name)
    if m:
        part = {"input_layernorm": "self_attn", "post_attention_layernorm": "mlp"}.get(
            m.group(2), m.group(2))
        return f"{m.group(1)}.{part}"
    if re.match(r"^(model\.)?norm\.", name):
        return "lm_head"
    return _split(name)[0] or name


def _fused_shards(name, param, owner, kind, entries, tp_size, tp_rank):
    """Shards of a fused parameter (QKV or merged column-parallel), stacked along dim 0."""
    shape = list(param.shape)
    rest = shape[1:]
    if kind == "QKVParallelLinear":
        head = owner.head_size
        q_local = owner.num_heads * head
        kv_local = owner.num_kv_heads * head
        total_kv_heads = getattr(owner, "total_num_kv_heads", owner.num_kv_heads * tp_size)
        replicas = max(1, tp_size // total_kv_heads) if total_kv_heads < tp_size else 1
        kv_rank = tp_rank // replicas
        sizes = {"q": (q_local, owner.total_num_heads * head, tp_rank * q_local),
                 "k": (kv_local, total_kv_heads * head, kv_rank * kv_local),
                 "v": (kv_local, total_kv_heads * head, kv_rank * kv_local)}
        order = ["q", "k", "v"]
    elif hasattr(owner, "output_sizes"):
        sizes = {}
        order = []
        for i, full in enumerate(owner.output_sizes):
            local = full // tp_size
            sizes[str(i)] = (local, full, tp_rank * local)
            order.append(str(i))
    else:
        raise Error("INVALID_ARGUMENT",
                    f"{name}: stacked in stacked_params_mapping but its module "
                    f"{type(owner).__name__} is neither QKVParallelLinear nor has output_sizes")
    by_id = {str(sid): shard_name for _, shard_name, sid in entries}
    shards, offset = [], 0
    for sid in order:
        local, full, start = sizes[sid]
        if sid not in by_id:
            raise Error("INVALID_ARGUMENT",
                        f"{name}: stacked_params_mapping has no entry for shard '{sid}'")
        param_name = entries[0][0]
        source = name.replace(param_name, by_id[sid], 1)
        shards.append({"id": sid, "source": source, "source_shape": [full] + rest,
                       "box": _box((offset, offset + local), rest),
                       "source_box": _box((start, start + local), rest)})
        offset += local
    if offset != shape[0]:
        raise Error("INVALID_ARGUMENT",
                    f"{name}: shards cover {offset} rows of {shape[0]} (module attributes "
                    f"disagree with the parameter's shape)")
    return shards


def _sliced_shard(name, shape, dim, tp_size, tp_rank):
    full = list(shape)
    full[dim] = shape[dim] * tp_size
    box = [[0, n] for n in shape]
    src = [[0, n] for n in shape]
    src[dim] = [tp_rank * shape[dim], (tp_rank + 1) * shape[dim]]
    return [{"id": "0", "source": name, "source_shape": full, "box": box, "source_box": src}]


def manifest_from_module(module, stacked_params_mapping=(), tp_size=1, tp_rank=0,
                         shard_dims=None, derived=None):
    """The wtx.Manifest of one TP rank of `module` (vLLM layout), from named_parameters().

    stacked_params_mapping: the model's [(param_name, shard_name, shard_id)], e.g.
      LLAMA_STACKED_PARAMS_MAPPING; a fused parameter gets one shard per entry, fed by the
      checkpoint tensor named with shard_name.
    shard_dims: {param name: dim or None} overrides the slicing dimension deduced from the
      owning module's class (None: replicated).
    derived: [{"name", "sources": [param names], "phase"}] derived states of the engine.
    """
    shard_dims = shard_dims or {}
    params, modules = [], {}
    for name, param in module.named_parameters():
        dtype = _DTYPES.get(str(param.dtype))
        if dtype is None:
            raise Error("INVALID_ARGUMENT", f"{name}: dtype {param.dtype} has no wtx dtype")
        owner_name, leaf = _split(name)
        owner = module.get_submodule(owner_name) if owner_name else module
        kind = type(owner).__name__
        shape = list(param.shape)
        entries = [e for e in stacked_params_mapping if e[0] in name]
        if name in shard_dims:
            dim = shard_dims[name]
            shards = (_sliced_shard(name, shape, dim, tp_size, tp_rank) if dim is not None
                      else _sliced_shard(name, shape, 0, 1, 0))
        elif entries:
            shards = _fused_shards(name, param, owner, kind, entries, tp_size, tp_rank)
        elif kind in ("ColumnParallelLinear", "VocabParallelEmbedding", "ParallelLMHead"):
            padded = getattr(owner, "num_embeddings_padded", None)
            org = getattr(owner, "org_vocab_size", None)
            if padded is not None and org is not None and padded != org:
                raise Error("INVALID_ARGUMENT",
                            f"{name}: padded vocabulary ({org} padded to {padded}) is not "
                            f"supported; use a vocabulary divisible by the padding")
            shards = _sliced_shard(name, shape, 0, tp_size, tp_rank)
        elif kind == "RowParallelLinear" and leaf == "weight":
            shards = _sliced_shard(name, shape, len(shape) - 1, tp_size, tp_rank)
        else:
            shards = _sliced_shard(name, shape, 0, 1, 0)  # replicated
        params.append({"name": name, "dtype": dtype, "shape": shape, "shards": shards})
        modules.setdefault(_module_of(name), []).append(name)
    doc = {"params": params,
           "modules": [{"name": k, "params": v} for k, v in modules.items()],
           "derived": list(derived or [])}
    return Manifest.from_json(json.dumps(doc))
