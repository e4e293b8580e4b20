"""Two-phase commit over the engine's own torch.distributed process group.

Every rank of the group builds one `Group` with its `wtx.Participant` and then calls
`begin` / `commit` / `abort` / `recover` together (they are collective). Group rank 0 runs the
C++ coordinator (`wtx.Coordinator.open_carried`): the protocol rules, the synced decision log and
presumed-abort recovery are the C++ ones. Each call the coordinator makes to a rank is an opaque
encoded message (CBOR) that this module carries with point-to-point `send`/`recv` (gloo on CPU,
NCCL on GPU); the rank answers it with `Participant.serve`, the same dispatch the TCP rank agent
uses. Python never interprets a request or a vote.

Failure model: a rank whose process died fails its calls (E_CRASHED) and the transaction
aborts; the other ranks still hear the decision. A rank restarted after it prepared is in
doubt: the collective `recover()` (also run when a Group is built) re-sends unacknowledged
decisions and resolves every in-doubt rank with the coordinator's logged decision, or presumed
abort. Timeouts are the process group's (`init_process_group(timeout=...)`).
"""

import hashlib
import json
from typing import Any, Dict, FrozenSet, List, Optional

import torch
import torch.distributed as dist

from . import _enter, _exit_closing
from ._wtx import Aborted, Coordinator, Error

__all__ = ["Group", "abort_quietly", "decide_update", "failure_reason",
           "gather_from_ranks"]

_CALL = 1
_END = 2


def _global_rank(group, group_rank):
    if group is None:
        return group_rank
    if hasattr(dist, "get_global_rank"):
        return dist.get_global_rank(group, group_rank)
    return dist.distributed_c10d._get_global_rank(group, group_rank)


class Group:
    """One rank's side of 2PC over `group` (None: the default group).

    participant: this rank's wtx.Participant; its rank must equal the group rank.
    coordinator_journal: the coordinator's journal directory (used on group rank 0 only).
    coordinator_options: more keywords of Coordinator.open_carried (e.g. request_timeout).
    Construction is collective and runs `recover()`.
    """

    def __init__(self, participant, coordinator_journal=None, group=None, prepare_timeout=30.0,
                 **coordinator_options):
        self.participant = participant
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if participant.rank != self.rank:
            raise Error("INVALID_ARGUMENT",
                        f"participant is rank {participant.rank} but this process is rank "
                        f"{self.rank} of the group")
        self._coordinator_global = _global_rank(group, 0)
        self._dead = set()
        self.coordinator = None
        if self.rank == 0:
            if not coordinator_journal:
                raise Error("INVALID_ARGUMENT", "group rank 0 needs coordinator_journal")
            self.coordinator = Coordinator.open_carried(
                coordinator_journal, num_ranks=self.size, carrier=self._carry,
                prepare_timeout=prepare_timeout, **coordinator_options)
        self.recover()

    # ------------------------------------------------------------------ collective operations

    def begin(self, tx, kind="full", base=None, modules=None, sources=None, rollback=False,
              verify="touched", lineage=None, step=None):
        """Begins `tx` on every rank (collective); a refusal raises wtx.Error on every rank.

        lineage/step: the step of the lineage this update commits (docs/fleet.md; None: the
        ranks' lineage and the next step). Returns {'tx', 'lineage', 'step'} on every rank.
        """
        return self._session(lambda c: c.begin(tx, kind=kind, base=base, modules=modules,
                                               sources=sources, rollback=rollback,
                                               verify=verify, lineage=lineage, step=step))

    def commit(self, tx, expect_version=None):
        """Prepares everywhere and decides (collective).

        Returns the outcome dict on every rank when the transaction committed (outcome
        "committed") or was empty (outcome "noop": nothing was written on any rank; each
        vote reads "noop"). Raises wtx.Aborted on every rank when it aborted or its outcome
        is unknown (outcome "in_doubt"): .decision is the outcome dict with the per-rank votes
        and every missing {param, shard, box}. expect_version: the version the sender computed
        (wtx.expected_version); a different one aborts with E_VERSION_MISMATCH.
        """
        out = self._session(lambda c: c.commit(tx, expect_version=expect_version))
        if out["outcome"] not in ("committed", "noop"):
            raise Aborted(tx, out)
        return out

    def abort(self, tx):
        """The sender gives up on `tx` (collective)."""
        return self._session(lambda c: c.abort(tx))

    def recover(self):
        """Re-sends logged decisions not yet acknowledged and resolves in-doubt ranks
        (collective). Returns {rank: resolved tx} for the ranks that were in doubt."""
        in_doubt = [None] * self.size
        dist.all_gather_object(in_doubt, self.participant.status()["in_doubt"], group=self.group)

        def run(c):
            c.recover()
            answers = {}
            for tx in in_doubt:
                if tx is not None and tx not in answers:
                    answers[tx] = list(c.query_decision(tx))
            return answers

        answers = self._session(run)
        if self.participant.status()["in_doubt"] is not None:
            self.participant.resolve_in_doubt(lambda tx: tuple(answers.get(tx, ("abort", ""))))
        return {r: tx for r, tx in enumerate(in_doubt) if tx is not None}

    def close(self):
        """Closes the coordinator this rank runs (group rank 0), releasing its journal; the
        participant stays open (close it yourself). Idempotent; a closed group refuses calls
        with wtx.Error. A new Group over the same participant re-initializes."""
        if self.coordinator is not None:
            self.coordinator.close()
            self.coordinator = None
        self._closed = True

    # A context manager like Participant and Coordinator: leaving the block closes it.
    __enter__ = _enter
    __exit__ = _exit_closing

    # ------------------------------------------------------------------------- the carrying

    def _session(self, fn):
        """Rank 0 runs fn(coordinator) while the other ranks serve its calls; everyone then
        gets fn's result (or its wtx.Error)."""
        if getattr(self, "_closed", False):
            raise Error("INVALID_ARGUMENT", f"rank {self.rank}: this wtx Group is closed "
                        "(open a new Group over the participant)")
        if self.rank == 0:
            result, error = None, None
            try:
                result = fn(self.coordinator)
            except Error as e:
                error = {"code": e.code, "message": e.message, "details": e.details}
            end = json.dumps({"result": result, "error": error}).encode()
            for r in range(1, self.size):
                if r not in self._dead:
                    try:
                        self._send(r, _END, end)
                    except RuntimeError:
                        self._dead.add(r)
            return self._finish(result, error)
        while True:
            try:
                kind, payload = self._recv_from_coordinator()
            except RuntimeError as e:
                raise Error("E_CRASHED", f"rank {self.rank}: the coordinator rank is gone: {e}")
            if kind == _END:
                out = json.loads(payload.decode())
                return self._finish(out["result"], out["error"])
            reply = self.participant.serve(payload)
            self._send_to_coordinator(reply)

    @staticmethod
    def _finish(result, error):
        if error is not None:
            raise Error(error["code"], error["message"], error["details"])
        return result

    def _carry(self, rank, request, timeout_s):
        """The coordinator's carrier: one request to `rank`, its reply back."""
        if rank == 0:
            return self.participant.serve(request)
        if rank in self._dead:
            raise Error("E_CRASHED", f"rank {rank} is gone")
        try:
            self._send(rank, _CALL, request)
            return self._recv_reply(rank)
        except RuntimeError as e:
            self._dead.add(rank)
            raise Error("E_CRASHED", f"rank {rank} is gone: {e}")

    # Frames: a header tensor [kind, length] (int64) then the payload bytes (uint8).
    def _send_frame(self, dst, kind, payload):
        dist.send(torch.tensor([kind, len(payload)], dtype=torch.int64), dst, group=self.group)
        if payload:
            dist.send(torch.frombuffer(bytearray(payload), dtype=torch.uint8), dst,
                      group=self.group)

    def _recv_frame(self, src):
        header = torch.empty(2, dtype=torch.int64)
        dist.recv(header, src, group=self.group)
        kind, n = int(header[0]), int(header[1])
        data = torch.empty(n, dtype=torch.uint8)
        if n:
            dist.recv(data, src, group=self.group)
        return kind, data.numpy().tobytes()

    def _send(self, rank, kind, payload):
        self._send_frame(_global_rank(self.group, rank), kind, payload)

    def _recv_reply(self, rank):
        return self._recv_frame(_global_rank(self.group, rank))[1]

    def _recv_from_coordinator(self):
        return self._recv_frame(self._coordinator_global)

    def _send_to_coordinator(self, reply):
        self._send_frame(self._coordinator_global, _CALL, reply)


# ------------------------------------------------------------- ending an update everywhere

def gather_from_ranks(item: Any, group: Group) -> List[Any]:
    """`item` of every rank of `group`, in rank order (collective)."""
    out: List[Any] = [None] * group.size
    dist.all_gather_object(out, item, group=group.group)
    return out


def sources_held_elsewhere(participant: Any, group: Group) -> FrozenSet[str]:
    """The sources other ranks of `group` hold and this one does not (collective): a pipeline
    stage, or an expert-parallel rank, receives every source of the model and keeps only its
    own, so these are received and dropped; a name no rank holds is still refused, by name."""
    mine = {s["source"] for q in participant.manifest.params for s in q["shards"]
            if s.get("source")}
    names = sorted(mine)
    # Tensor-parallel peers hold the same sources: a digest each settles that, and the names
    # travel only where the ranks differ (stages, experts).
    digest = hashlib.sha256("\0".join(names).encode()).hexdigest()
    if len(set(gather_from_ranks(digest, group))) == 1:
        return frozenset()
    everyone = gather_from_ranks(names, group)
    return frozenset(set().union(*(set(n) for n in everyone)) - mine)


def failure_reason(failures: List[Optional[str]]) -> str:
    """"rank R: cause; ..." for the ranks whose failure is set."""
    return "; ".join(f"rank {r}: {f}" for r, f in enumerate(failures) if f)


def abort_quietly(group: Group, tx: str) -> None:
    """Aborts `tx` on every rank (collective); one decided already (a commit that raised after
    its decision) is left as it is."""
    try:
        group.abort(tx)
    except Error:
        pass


def decide_update(group: Group, tx: str, failure: Optional[str],
                  expected: Optional[str]) -> Dict[str, Any]:
    """Ends an update on every rank (collective): the ranks' failures (None: none here) are
    exchanged first, and any makes every rank abort, raising wtx.Aborted whose outcome names
    each rank and cause ("reason", and error E_UPDATE_FAILED); otherwise prepare and commit,
    checked against `expected` (wtx.Aborted when the commit aborts). Returns the outcome."""
    failures = gather_from_ranks(failure, group)
    if any(failures):
        reason = failure_reason(failures)
        raise Aborted(tx, dict(group.abort(tx), reason=reason, outcome="aborted",
                               error={"code": "E_UPDATE_FAILED", "message": reason}))
    return group.commit(tx, expect_version=expected)


def gather_stages(stage: int, group: Any) -> List[int]:
    """Every rank's pipeline stage, in the order of `group` (collective over it)."""
    stages: List[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(stages, int(stage), group=group)
    return [int(s) for s in stages]
