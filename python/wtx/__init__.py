"""wtx: journaled all-ranks weight-update transactions for PyTorch inference engines.

    import wtx
    m = wtx.Manifest.from_hf_config("config.json", tp=2, rank=0, dtype="bf16")
    p = wtx.Participant.open("/var/wtx/rank0", m, rank=0, tensors=live_tensors)
    c = wtx.Coordinator.open("/var/wtx/coord", participants=[p0, p1])
    c.begin("tx1"); p.write_source("model.embed_tokens.weight", w); out = c.commit("tx1")

See docs/python.md. `wtx.torch_dist` runs the same protocol over a torch.distributed process
group; `wtx.vllm` is a worker extension with vLLM's weight-transfer call names.
"""

from ._wtx import Coordinator, Error, Manifest, Participant, history

__all__ = ["Coordinator", "Error", "Manifest", "Participant", "history", "slice_source"]


def slice_source(tensor, source_box):
    """The part of a full source tensor that `source_box` ([[begin, end], ...]) selects."""
    return tensor[tuple(slice(b, e) for b, e in source_box)]


def _write_source(self, source, tensor):
    """Writes every shard this rank holds of `source` from the full source tensor (row-major,
    in the live parameter's dtype), slicing by each shard's source box; all pieces are checked
    before any byte lands. Returns the number of shards written (0: this rank holds none)."""
    shards = self.manifest.source_shards(source)
    if not shards:
        return 0
    want = list(shards[0]["source_shape"])
    shape = list(getattr(tensor, "shape", ()))
    if shape != want:
        raise Error("E_BAD_WRITE",
                    f"source tensor '{source}' has shape {shape}, expected {want}")
    pieces = []
    for s in shards:
        piece = slice_source(tensor, s["source_box"])
        if hasattr(piece, "contiguous"):
            piece = piece.contiguous()
        else:  # numpy
            import numpy
            piece = numpy.ascontiguousarray(piece)
        pieces.append((s["param"], piece, s["id"], s["box"]))
    self.write_many(pieces)
    return len(pieces)


if not hasattr(Participant, "write_source"):
    Participant.write_source = _write_source
