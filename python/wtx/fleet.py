"""A fleet of replicas as one versioned system (docs/fleet.md).

Each replica (the ranks of one server, or one data-parallel replica) registers every rank in a
registry in etcd, next to the decision log: ``etcd://HOST:PORT[,HOST:PORT...]/PREFIX`` (the
registry's keys live under ``PREFIX/fleet/<fleet>/``). A router asks which replicas it may
route to; a replica too far behind the fleet's newest step holds (its serving gate refuses to
generate) until it serves an admissible step::

    import wtx, wtx.fleet
    wtx.fleet.set_policy("etcd://10.0.0.5:2379/wtx", "rollout", max_lag=1)
    with wtx.fleet.Member(participant, "etcd://10.0.0.5:2379/wtx", "rollout",
                          replica="dp3", world=8):
        ...  # the engine serves; participant.status()["held"] says why it holds, if it does
    wtx.fleet.serving("etcd://10.0.0.5:2379/wtx", "rollout", min_step=41)

Failures raise ``wtx.Error`` with its code: ``E_DECISION_LOG_UNAVAILABLE`` when no etcd member
answers (naming each), ``INVALID_ARGUMENT`` for a malformed url, fleet, replica or policy.
"""

import threading
from typing import Any, Callable, Dict, List, Optional

from . import _wtx

__all__ = ["Member", "join", "policy", "serving", "set_policy", "status"]

_UNSET: Any = object()


def status(decision_log: str, fleet: str, *, request_timeout: float = 2.0) -> Dict[str, Any]:
    """The fleet as its registry holds it: {"fleet", "lineage", "newest_step",
    "published_step", "policy": {"max_lag", "quorum", "lineage"}, "replicas": [{"replica",
    "lineage", "step", "version", "state" ("serving", "updating", "held", "catching_up"),
    "lag" (steps behind newest_step), "reason" (why it does not serve, else None), "ranks",
    "world"}]}, the same document as ``wtx fleet status --json``. A replica more than the
    policy's max_lag behind is "held" here even before its own member notices."""
    return _wtx.fleet_status(decision_log, fleet, request_timeout)


def serving(decision_log: str, fleet: str, min_step: Optional[int] = None, *,
            request_timeout: float = 2.0) -> List[Dict[str, Any]]:
    """The replicas a router may send requests to (each a replica dict of status()): serving,
    admitted by the fleet's policy, and at ``min_step`` or newer when it is given."""
    if min_step is not None and (isinstance(min_step, bool) or not isinstance(min_step, int)
                                 or min_step < 0):
        raise _wtx.Error("INVALID_ARGUMENT",
                         f"min_step: expected a whole number >= 0, got {min_step!r}")
    return _wtx.fleet_serving(decision_log, fleet, min_step, request_timeout)


def policy(decision_log: str, fleet: str, *, request_timeout: float = 2.0) -> Dict[str, Any]:
    """The fleet's policy: {"max_lag" (None: unbounded), "quorum" (0: every live replica),
    "lineage" ("": the first one committed)}."""
    return status(decision_log, fleet, request_timeout=request_timeout)["policy"]


def set_policy(decision_log: str, fleet: str, *, max_lag: Optional[int] = _UNSET,
               quorum: int = _UNSET, lineage: str = _UNSET,
               request_timeout: float = 2.0) -> Dict[str, Any]:
    """Changes what is given of the fleet's policy (the rest stays) and returns it. ``max_lag``:
    steps a serving replica may be behind the newest step (0: strictly on-policy; None: no
    bound). ``quorum``: replicas that must serve a step before it is published (0: every live
    replica). ``lineage``: the fleet's lineage ("": the first one committed). The members apply
    it at their next report."""
    current = policy(decision_log, fleet, request_timeout=request_timeout)
    if max_lag is not _UNSET:
        if max_lag is not None and (isinstance(max_lag, bool) or not isinstance(max_lag, int)
                                    or max_lag < 0):
            raise _wtx.Error("INVALID_ARGUMENT",
                             f"max_lag: expected a whole number >= 0 or None, got {max_lag!r}")
        current["max_lag"] = max_lag
    if quorum is not _UNSET:
        if isinstance(quorum, bool) or not isinstance(quorum, int) or not 0 <= quorum < 2**31:
            raise _wtx.Error("INVALID_ARGUMENT",
                             f"quorum: expected a whole number >= 0, got {quorum!r}")
        current["quorum"] = quorum
    if lineage is not _UNSET:
        if not isinstance(lineage, str):
            raise _wtx.Error("INVALID_ARGUMENT", f"lineage: expected a str, got {lineage!r}")
        current["lineage"] = lineage
    return _wtx.set_fleet_policy(decision_log, fleet, current["max_lag"], current["quorum"],
                                  current["lineage"], request_timeout)


class Member:
    """One rank of one replica in a fleet (a context manager; ``close()`` otherwise).

    Registers ``participant`` (a ``wtx.Participant``: its rank, lineage, step, version and
    state) under a lease of ``ttl`` seconds, reports every ``period`` seconds (None: a third of
    the TTL) and on ``report_now()``, keeps the fleet's newest and published steps current,
    and holds the participant (``participant.status()["held"]``, ``"serving"`` False: the
    engines' serving gate then refuses to generate) from the start until a report finds its
    step admissible under the fleet's policy, and again whenever it is not, or when the
    registry has not answered for a TTL. ``world``: ranks in the replica (0: unknown; a
    missing rank then goes unnoticed). Closing it revokes the lease (the record goes at once)
    and releases the hold. Close it before the participant."""

    def __init__(self, participant: Any, decision_log: str, fleet: str, replica: str, *,
                 world: int = 0, ttl: float = 6.0, period: Optional[float] = None,
                 request_timeout: float = 2.0,
                 on_hold: Optional[Callable[[str], None]] = None) -> None:
        if isinstance(world, bool) or not isinstance(world, int) or not 0 <= world < 2**31:
            raise _wtx.Error("INVALID_ARGUMENT",
                             f"world: expected a whole number >= 0, got {world!r}")
        self._member: Any = _wtx.FleetMember(participant, decision_log, fleet, replica, world,
                                              float(ttl), 0.0 if period is None else
                                              float(period), float(request_timeout))
        self.fleet = fleet
        self.replica = replica
        # on_hold(reason): called (from a thread of the member's) whenever the member holds
        # the participant, for engines whose gate is a flag rather than a status read on every
        # forward pass (SGLang's _engine_paused).
        self._stop = threading.Event()
        self._watcher: Optional[threading.Thread] = None
        if on_hold is not None:
            interval = max(0.05, (ttl / 3 if period is None else period) / 2)
            self._watcher = threading.Thread(target=self._watch, args=(on_hold, interval),
                                             name=f"wtx-fleet-{replica}", daemon=True)
            self._watcher.start()

    def _watch(self, on_hold: Callable[[str], None], interval: float) -> None:
        while not self._stop.wait(interval):
            member = self._member
            why = member.hold if member is not None else None
            if why:
                on_hold(why)

    def report_now(self) -> None:
        """One report now (after a commit: the fleet sees the new step at once). Raises
        wtx.Error E_DECISION_LOG_UNAVAILABLE when the registry does not answer, INVALID_ARGUMENT
        once closed."""
        if self._member is None:
            raise _wtx.Error("INVALID_ARGUMENT", f"fleet member {self.replica!r} is closed")
        self._member.report_now()

    @property
    def hold(self) -> Optional[str]:
        """Why the member holds its participant now; None when it does not (or it is closed)."""
        return self._member.hold if self._member is not None else None

    @property
    def last_status(self) -> Optional[Dict[str, Any]]:
        """The fleet (as status() returns it) at the last successful report; None before (or
        once closed). Its "replicas" are listed only when that report read them (a report reads
        the policy and the newest and published steps, and every replica only while this rank
        serves a step newer than the published one); status() reads everything."""
        return self._member.last_status if self._member is not None else None

    def close(self) -> None:
        """Leaves the fleet: the lease is revoked and the hold released. Idempotent."""
        self._stop.set()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join()
        if self._member is not None:
            self._member.close()
            self._member = None

    def __enter__(self) -> "Member":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def join(participant: Any, config: Any, *, world: int, what: str = "fleet",
         on_hold: Optional[Callable[[str], None]] = None) -> Member:
    """A Member from an engine's configuration (vLLM's ``init_info["fleet"]``, SGLang's
    ``init_wtx(fleet=...)``): {"registry": "etcd://HOST:PORT/PREFIX", "name": fleet,
    "replica": this replica's id, "ttl": seconds (default 6), "period": seconds (default a third
    of the TTL)}. Every error names the field (``what``.registry, ...)."""
    if not isinstance(config, dict):
        raise _wtx.Error("INVALID_ARGUMENT", f"{what}: expected a dict with registry, name and "
                         f"replica, got {type(config).__name__}")
    unknown = sorted(set(config) - {"registry", "name", "replica", "ttl", "period"})
    if unknown:
        raise _wtx.Error("INVALID_ARGUMENT", f"{what}.{unknown[0]}: unknown field (expected "
                         "registry, name, replica, ttl, period)")
    for key in ("registry", "name", "replica"):
        if not isinstance(config.get(key), str) or not config.get(key):
            raise _wtx.Error("INVALID_ARGUMENT", f"{what}.{key}: expected a non-empty string, "
                             f"got {config.get(key)!r}")
    for key in ("ttl", "period"):
        v = config.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or
                              not v > 0):
            raise _wtx.Error("INVALID_ARGUMENT", f"{what}.{key}: expected seconds > 0, got {v!r}")
    try:
        return Member(participant, config["registry"], config["name"], config["replica"],
                      world=world, ttl=float(config.get("ttl") or 6.0),
                      period=config.get("period"), on_hold=on_hold)
    except _wtx.Error as e:
        raise _wtx.Error(e.code, f"{what}: {e.message}") from None
