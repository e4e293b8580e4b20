"""wtx: journaled all-ranks weight-update transactions for PyTorch inference engines.

    import wtx
    m = wtx.Manifest.from_hf_config("config.json", tp=2, rank=0, dtype="bf16")
    p = wtx.Participant.open("/var/wtx/rank0", m, rank=0, tensors=live_tensors)
    c = wtx.Coordinator.open("/var/wtx/coord", participants=[p0, p1])
    c.begin("tx1"); p.write_source("model.embed_tokens.weight", w); out = c.commit("tx1")

See docs/python.md. `wtx.torch_dist` runs the same protocol over a torch.distributed process
group; `wtx.m2n` runs a transfer plan (wtx.plan_transfer) from sharded trainer processes to
engine processes over torch.distributed; `wtx.vllm` is a worker extension with vLLM's weight-transfer call names.
"""

import math

from ._wtx import (Aborted, Coordinator, DecisionLog, Error, ExpectedVersionBuilder, Manifest,
                   Participant, TransferPlan, expected_version, history, piece_digest,
                   plan_transfer)

from . import metrics as _metrics

# wtx's Prometheus series in prometheus_client's default registry, where it is importable
# (wtx/metrics.py, docs/observability.md): the engines' own /metrics endpoints show them.
_metrics.install()

__all__ = ["Aborted", "Coordinator", "DecisionLog", "Error", "ExpectedVersionBuilder", "Manifest",
           "Participant", "TransferPlan", "expected_version", "history", "module_from_manifest",
           "piece_digest", "plan_transfer", "slice_source"]


def slice_source(tensor, source_box):
    """The part of a full source tensor that `source_box` ([[begin, end], ...]) selects."""
    return tensor[tuple(slice(b, e) for b, e in source_box)]


def module_from_manifest(manifest, requires_grad=False):
    """A torch.nn.Module whose named_parameters() are exactly `manifest`'s parameters (dotted
    names become submodules), zero-filled in the manifest's dtypes: an engine stand-in for tests
    and benchmarks, to bind a participant to (`Participant.open(..., tensors=module)`)."""
    import torch
    from torch import nn

    root = nn.Module()
    for p in manifest.params:
        *path, leaf = p["name"].split(".")
        mod = root
        for part in path:
            if part not in mod._modules:
                mod.add_module(part, nn.Module())
            mod = mod._modules[part]
        dtype = getattr(torch, _TORCH_DTYPES[p["dtype"]])
        mod.register_parameter(leaf, nn.Parameter(torch.zeros(p["shape"], dtype=dtype),
                                                  requires_grad=requires_grad))
    return root


_TORCH_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16",
                 "fp8_e4m3": "float8_e4m3fn", "i8": "int8", "u8": "uint8", "i32": "int32"}


def _live_view(self, r):
    """A torch view of reservation `r`'s box in the live tensor."""
    import torch

    t = self.live_tensor(r["param"])
    if t is None:  # participant-owned host buffers
        if not r["host"]:
            raise Error("INVALID_ARGUMENT",
                        f"reserve {r['param']}: live memory is not host-addressable; write to "
                        f"device_ptr {r['device_ptr']:#x} instead")
        import ctypes

        raw = (ctypes.c_uint8 * r["param_bytes"]).from_address(r["host"])
        t = torch.frombuffer(raw, dtype=torch.uint8).view(
            getattr(torch, _TORCH_DTYPES[r["dtype"]])).reshape(r["shape"])
    return t[tuple(slice(b, e) for b, e in r["box"])]


def _whole_view(reservations, box, dtype):
    """The torch view to receive piece `box` ([[lo, hi], ...], source coordinates) of `dtype`
    into, straight in live memory: the one reservation's view when it is all of the piece as one
    contiguous run, reshaped to the piece; None otherwise (receive into a buffer, then
    _fill_reserved)."""
    shape = [e - b for b, e in box]
    if len(reservations) != 1:
        return None
    view = reservations[0]["view"]
    if view.dtype != dtype or not view.is_contiguous() or view.numel() != math.prod(shape):
        return None
    return view.view(shape)


def _fill_reserved(reservations, buffer, box):
    """Copies into each reservation's view its part of `buffer`, which holds piece `box`."""
    for r in reservations:
        part = tuple(slice(b - o, e - o) for (b, e), (o, _) in zip(r["source_box"], box))
        r["view"].copy_(buffer[part].reshape(r["view"].shape))


def _reserve(self, param, shard=None, box=None):
    """Reserves a region of `param` (a shard, a box, or all of it) for an in-place landing and
    returns the torch view of the live tensor to fill (e.g. dist.recv(view, src)). Call
    landed() with the same arguments once the bytes are complete."""
    rs = self._reserve(param=param, shard=shard, box=box)
    return _live_view(self, rs[0])


def _reserve_source(self, source, source_box=None):
    """Reserves every shard this rank holds of `source`: [{param, shard, box, view, ...}].
    With source_box ([[lo, hi], ...], source coordinates: one piece of the source), the part of
    the piece each shard holds; each reservation's "source_box" names its part, and its view has
    that part's extents (after any leading expert-slot dimension). [] when none intersects."""
    return [dict(r, view=_live_view(self, r))
            for r in self._reserve(source=source, source_box=source_box)]


def _landed(self, param, shard=None, box=None):
    """The region reserved with the same arguments is complete: it counts as written."""
    self._landed(param=param, shard=shard, box=box)


def _landed_source(self, source, source_box=None):
    """Every shard of `source` (or of the piece source_box) reserved with reserve_source is
    complete: they count as written."""
    self._landed(source=source, source_box=source_box)


# The landing calls with torch views, on the extension's class (declared in _wtx.pyi).
setattr(Participant, "reserve", _reserve)
setattr(Participant, "reserve_source", _reserve_source)
setattr(Participant, "landed", _landed)
setattr(Participant, "landed_source", _landed_source)


def _enter(self):
    return self


def _exit_closing(self, *exc):
    self.close()
    return False


# Participant and Coordinator are context managers: leaving the block closes them (the journal
# is released; a new open of the same directory re-initializes).
for _cls in (Participant, Coordinator):
    setattr(_cls, "__enter__", _enter)
    setattr(_cls, "__exit__", _exit_closing)
