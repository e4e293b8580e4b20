"""wtx: journaled all-ranks weight-update transactions for PyTorch inference engines.

    import wtx
    m = wtx.Manifest.from_hf_config("config.json", tp=2, rank=0, dtype="bf16")
    p = wtx.Participant.open("/var/wtx/rank0", m, rank=0, tensors=live_tensors)
    c = wtx.Coordinator.open("/var/wtx/coord", participants=[p0, p1])
    c.begin("tx1"); p.write_source("model.embed_tokens.weight", w); out = c.commit("tx1")

See docs/python.md. `wtx.torch_dist` runs the same protocol over a torch.distributed process
group; `wtx.vllm` is a worker extension with vLLM's weight-transfer call names.
"""

from ._wtx import Coordinator, Error, Manifest, Participant, expected_version, history

__all__ = ["Coordinator", "Error", "Manifest", "Participant", "expected_version", "history",
           "slice_source"]


def slice_source(tensor, source_box):
    """The part of a full source tensor that `source_box` ([[begin, end], ...]) selects."""
    return tensor[tuple(slice(b, e) for b, e in source_box)]
