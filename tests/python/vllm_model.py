"""The tiny Llama as vLLM's own model code loads it: every parameter carries a `weight_loader`
(vLLM's linear.py / vocab_parallel_embedding.py: QKVParallelLinear's takes a shard id q/k/v,
MergedColumnParallelLinear's an index, RowParallelLinear's slices columns, the embedding and
LM head slice rows, default_weight_loader copies), and `load_weights` maps HF names through the
stacked mapping and calls them (vllm/model_executor/models/llama.py, LlamaModel.load_weights).
vLLM's layerwise reload (vllm_double/vllm/model_executor/model_loader/reload.py) wraps exactly
these loaders.

`o_proj` layers carry a processing step like a quantized method's: a `quant_method` whose
process_weights_after_loading(layer) computes the layer's derived `weight_scale` buffer (the
absolute maximum of each row, as fp8 requantization derives its scales), so post-load processing
is observable: the buffer is stale unless processing ran on the served model.
"""

import torch
from torch import nn

from tiny_llama import CONFIG, TpLlama
from wtx.vllm import LLAMA_STACKED_PARAMS_MAPPING


class PPMissingLayer(nn.Identity):
    """vLLM's stand-in for a layer another pipeline stage holds
    (vllm/model_executor/models/utils.py): no parameters."""


def is_pp_missing_parameter(name: str, model: nn.Module) -> bool:
    """vLLM's check (models/utils.py): `name` lies under a PPMissingLayer of `model`, so its
    loader skips it."""
    return any(name.startswith(prefix + ".") for prefix, m in model.named_modules()
               if isinstance(m, PPMissingLayer))


def keep_stage(model: "VllmLlama", stage: int, stages: int) -> "VllmLlama":
    """`model` as pipeline stage `stage` of `stages` holds it (vLLM's make_layers and
    PPMissingLayer): its share of the layers, the embedding on the first stage, the final norm
    and the LM head on the last; the rest become PPMissingLayer. Forward passes are not
    modelled for a stage (the tests judge its bytes)."""
    layers = model.model.layers
    per = len(layers) // stages
    for i in range(len(layers)):
        if not stage * per <= i < (stage + 1) * per:
            layers[i] = PPMissingLayer()
    if stage != 0:
        model.model.embed_tokens = PPMissingLayer()
    if stage != stages - 1:
        model.model.norm = PPMissingLayer()
        model.lm_head = PPMissingLayer()
    return model


class RowScaleMethod:
    """A quant_method stand-in: the derived per-row scale of the layer's weight."""

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        scale: torch.Tensor = layer.weight_scale  # type: ignore[assignment]
        scale.copy_(layer.weight.detach().float().abs().amax(dim=1))  # type: ignore[operator]


def _qkv_loader(c, tp, r):
    q = c["heads"] * c["head"] // tp
    kv = c["kv_heads"] * c["head"] // tp

    def load(param, w, shard_id):
        off = {"q": 0, "k": q, "v": q + kv}[shard_id]
        n = q if shard_id == "q" else kv
        param.data[off:off + n].copy_(w[r * n:(r + 1) * n])
    return load


def _merged_loader(c, tp, r):
    n = c["inter"] // tp

    def load(param, w, shard_id):
        param.data[shard_id * n:(shard_id + 1) * n].copy_(w[r * n:(r + 1) * n])
    return load


def _row_parallel_loader(r):
    def load(param, w):
        n = param.shape[1]
        param.data.copy_(w[:, r * n:(r + 1) * n])
    return load


def _vocab_loader(r):
    def load(param, w):
        n = param.shape[0]
        param.data.copy_(w[r * n:(r + 1) * n])
    return load


def default_weight_loader(param, w):
    param.data.copy_(w)


class VllmLlama(TpLlama):
    """TpLlama with vLLM's loaders. `fail_on`: a name whose load raises (a broken loader)."""

    fail_on = None
    stacked_params_mapping = LLAMA_STACKED_PARAMS_MAPPING

    def __init__(self, tp_size=2, tp_rank=0, group=None, dtype=torch.bfloat16, config=CONFIG):
        super().__init__(tp_size, tp_rank, group, dtype, config)
        c, r = self.c, tp_rank
        for name, p in self.named_parameters():
            if "qkv_proj" in name:
                p.weight_loader = _qkv_loader(c, tp_size, r)
            elif "gate_up_proj" in name:
                p.weight_loader = _merged_loader(c, tp_size, r)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                p.weight_loader = _row_parallel_loader(r)
            elif name.endswith(("embed_tokens.weight", "lm_head.weight")):
                p.weight_loader = _vocab_loader(r)
            else:
                p.weight_loader = default_weight_loader
        for layer in self.model.layers:
            if isinstance(layer, PPMissingLayer):
                continue
            o = layer.self_attn.o_proj
            o.quant_method = RowScaleMethod()
            o.register_buffer("weight_scale", torch.zeros(o.weight.shape[0]))

    def load_weights(self, weights):
        params = dict(self.named_parameters())
        loaded = set()
        for name, w in weights:
            if name == self.fail_on:
                raise RuntimeError(f"the model's loader cannot load {name}")
            for fused, part, sid in LLAMA_STACKED_PARAMS_MAPPING:
                if part in name:
                    if is_pp_missing_parameter(name.replace(part, fused), self):
                        break  # another pipeline stage's
                    param = params[name.replace(part, fused)]
                    param.weight_loader(param, w, sid)
                    break
            else:
                if is_pp_missing_parameter(name, self):
                    continue
                param = params[name]
                param.weight_loader(param, w)
            loaded.add(name)
        return loaded

    def scales_fresh(self) -> bool:
        """Whether every derived scale equals what processing computes from the weight."""
        return all(torch.equal(layer.self_attn.o_proj.weight_scale,
                               layer.self_attn.o_proj.weight.detach().float().abs().amax(dim=1))
                   for layer in self.model.layers)
