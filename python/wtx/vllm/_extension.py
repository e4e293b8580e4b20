"""The worker extension of wtx.vllm: weight updates as wtx transactions, own call names.

Load it with `--worker-extension-cls wtx.vllm.WtxWorkerExtension` (vLLM mixes the class into its
worker; `collective_rpc("start_weight_update", ...)` etc. then reach every TP rank). It also
works on any object that has a `model` (or `model_runner.model`) attribute: vLLM need not be
installed. The call names are vLLM's weight-transfer ones:

    init_wtx(journal_dir, coordinator_journal, stacked_params_mapping=..., group=None)
    start_weight_update(tx, kind="full", ...)     # begin (collective)
    update_weights(named_tensors)                  # HF-named full tensors -> this rank's slices
    finish_weight_update()                         # refresh hook, then commit (collective)
    abort_weight_update()

`manifest_from_module` builds the rank's manifest from a live torch.nn.Module with vLLM's fused
layout (QKVParallelLinear, MergedColumnParallelLinear, Column/RowParallelLinear,
VocabParallelEmbedding / ParallelLMHead, everything else replicated) and the model's
`stacked_params_mapping` — no config file needed.
"""

import torch.distributed as dist

from .. import Error, Participant
from .._module_manifest import LLAMA_STACKED_PARAMS_MAPPING, manifest_from_module
from ..torch_dist import Group

__all__ = ["LLAMA_STACKED_PARAMS_MAPPING", "WtxWorkerExtension", "manifest_from_module"]


# vLLM's LlamaForCausalLM.stacked_params_mapping: (param_name, shard_name, shard_id).


class WtxWorkerExtension:
    """Mixed into a vLLM worker (or any object with `model` / `model_runner.model`)."""

    def _wtx_model(self):
        runner = getattr(self, "model_runner", None)
        if runner is not None and getattr(runner, "model", None) is not None:
            return runner.model
        return self.model

    def init_wtx(self, journal_dir, coordinator_journal=None, stacked_params_mapping=None,
                 group=None, tp_size=None, tp_rank=None, kernel_identity="", derived=None,
                 manifest=None, prepare_timeout=30.0, **participant_options):
        """Opens this rank's participant over the model's live parameters and joins 2PC over
        `group` (collective; recovers an in-doubt rank). Returns the participant's status.

        The participant is bound to the model itself (not to `.data` copies of its tensors):
        a parameter the engine later rebinds (`param.data = ...`, a new Parameter, a
        re-layout) or frees is seen at every phase, never written or vouched for. Call again
        after close_wtx() to re-initialize; a second init_wtx on an open extension raises.
        """
        if getattr(self, "wtx_participant", None) is not None:
            raise Error("INVALID_ARGUMENT",
                        "init_wtx: wtx is already initialized on this worker; close_wtx() first")
        model = self._wtx_model()
        if tp_size is None:
            tp_size = dist.get_world_size(group)
        if tp_rank is None:
            tp_rank = dist.get_rank(group)
        if manifest is None:
            mapping = (stacked_params_mapping if stacked_params_mapping is not None
                       else getattr(model, "stacked_params_mapping", LLAMA_STACKED_PARAMS_MAPPING))
            manifest = manifest_from_module(model, mapping, tp_size, tp_rank, derived=derived)
        participant = Participant.open(journal_dir, manifest, rank=tp_rank, tensors=model,
                                       kernel_identity=kernel_identity, **participant_options)
        try:
            self.wtx_group = Group(participant, coordinator_journal, group=group,
                                   prepare_timeout=prepare_timeout)
        except BaseException:
            participant.close()
            raise
        self.wtx_participant = participant
        self._wtx_tx = None
        if not hasattr(self, "_wtx_refresh_hook"):
            self._wtx_refresh_hook = None
        return self.wtx_participant.status()

    def close_wtx(self):
        """Closes this rank's participant and (on group rank 0) the coordinator, releasing
        their journals. Idempotent; init_wtx may then run again."""
        group = getattr(self, "wtx_group", None)
        participant = getattr(self, "wtx_participant", None)
        self.wtx_group = None
        self.wtx_participant = None
        self._wtx_tx = None
        if group is not None:
            group.close()
        if participant is not None:
            participant.close()

    def register_refresh_hook(self, hook):
        """hook(names) recomputes the engine's derived state `names` (stale after the update);
        called by finish_weight_update before the commit."""
        self._wtx_refresh_hook = hook

    def start_weight_update(self, tx, kind="full", base=None, modules=None, sources=None,
                            rollback=False, verify="touched"):
        """Begins `tx` on every TP rank (collective).

        First re-resolves every parameter: storage the engine rebound since the last update
        is adopted (rebind) and, for a partial or delta update, proved equal to the committed
        version (verify) before anything is written; storage that cannot be proved makes the
        begin fail on every rank (a full update may follow: it rewrites every byte). Raises
        wtx.Error naming the refusal (E_DIRTY, E_STORAGE_MOVED, E_BASE_MISMATCH, ...).
        """
        self._wtx_readopt(kind)
        self.wtx_group.begin(tx, kind=kind, base=base, modules=modules, sources=sources,
                             rollback=rollback, verify=verify)
        self._wtx_tx = tx

    def _wtx_readopt(self, kind):
        p = self._wtx_require_open("start_weight_update")
        try:
            p.check_storage()
            return
        except Error as e:
            if e.code != "E_STORAGE_MOVED":
                raise
        # The engine reallocated: adopt its storage; serve only what verify proves.
        p.rebind()
        if kind != "full":
            p.verify()

    def update_weights(self, named_tensors):
        """HF-named full tensors; each lands in this rank's slices of the fused parameters.
        Returns the number of shards written on this rank. A name no rank of the model has is
        wtx.Error E_UNKNOWN_SOURCE; tensors in another floating dtype are converted to the
        live dtype (as torch's .to())."""
        self._wtx_require_tx("update_weights")
        written = 0
        for name, tensor in named_tensors:
            written += self.wtx_participant.write_source(name, tensor)
        return written

    def finish_weight_update(self):
        """Refreshes stale derived state through the registered hook, then commits
        (collective). Returns the outcome dict of a commit (or of a noop: nothing was
        written); raises wtx.Aborted (with .decision, .votes, .missing) when the transaction
        aborted, so a failed update is never mistaken for a served one."""
        tx = self._wtx_require_tx("finish_weight_update")
        stale = self.wtx_participant.status()["stale_derived"]
        if stale and self._wtx_refresh_hook is not None:
            self._wtx_refresh_hook(list(stale))
            for name in stale:
                self.wtx_participant.refresh(name)
        self._wtx_tx = None
        return self.wtx_group.commit(tx)

    def abort_weight_update(self):
        """The sender gives up on the update (collective); returns the abort's outcome dict."""
        tx = self._wtx_require_tx("abort_weight_update")
        self._wtx_tx = None
        return self.wtx_group.abort(tx)

    def wtx_status(self):
        """This rank's participant status (version, dirty, loaded, serving, storage_moved)."""
        return self._wtx_require_open("wtx_status").status()

    def _wtx_require_open(self, call):
        p = getattr(self, "wtx_participant", None)
        if p is None:
            raise Error("INVALID_ARGUMENT", f"{call}: wtx is not initialized on this worker "
                        "(init_wtx)")
        return p

    def _wtx_require_tx(self, call):
        self._wtx_require_open(call)
        tx = getattr(self, "_wtx_tx", None)
        if tx is None:
            raise Error("E_NO_TX", f"{call}: no weight update started (start_weight_update)")
        return tx
