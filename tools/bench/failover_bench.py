#!/usr/bin/env python3
"""Failover latency of `wtx coordinator` over an etcd decision log, per fault kind (issues 27, 36).

Starts a 3-member etcd cluster on loopback (tests/etcd/etcd_cluster.py; etcd's own election
settings by default: heartbeat 100 ms, election timeout 1 s), a leader and a standby coordinator
(--test-hooks: the build tree's wtx) and R ranks on the tiny manifest that list both (--connect
A,B --decision-log URL). Then --rounds rounds, the fault kinds in turn:

  * kill: a full transaction is committed with the leader's crash point armed
    (after_decision_logged and before_decision_logged in turn); the commit answers E_CRASHED
    and the leader is killed (SIGKILL);
  * pause: the same, but the leader is paused (SIGSTOP) instead, and continued (SIGCONT) once
    every rank resolved and the standby leads; it must exit with status 4;
  * etcd_leader: the etcd raft leader is killed (SIGKILL) and a written transaction committed
    at once; the wtx leader must keep leading (the standby never takes over). The election is
    timed too (kill to the first write a surviving member takes);
  * standby: the standby is killed (SIGKILL) and a written transaction committed at once;
  * compound: as kill, and 0.8 to 2 s later the etcd raft leader is killed too: the standby
    takes over during the election (goal 2 TTL + 1 s); it must never exit for a leader that
    does not exist (a note when it does).

The clock runs from the fault to the moment the LAST rank holds the decided outcome, polled on
every rank's control port every 10 ms: the new version served (commit), or the previous commit
with nothing in doubt or active (abort). A killed or paused leader is restarted on its journal
and port as the new standby, so the leadership alternates; a killed etcd member or standby is
restarted. Prints one JSON document: p50/p99/max (ms) per fault kind (and per crash point), the
etcd election times, the lease TTL, and the goal (TTL + 1000 ms).

A round that cannot go on (the new leader refuses `begin`, e.g. its recovery failed) is
counted in "restarts" with its error, and the whole topology is started again on a fresh
prefix and fresh journals.

    /usr/bin/python3 tools/bench/failover_bench.py --rounds 40 --ranks 2
"""

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "etcd"))

from etcd_cluster import EtcdCluster, etcd_available  # noqa: E402
import wtx_procs  # noqa: E402
from wtx_procs import Run, free_ports, status_code  # noqa: E402


def percentile(values, q):
    if not values:
        return None
    v = sorted(values)
    k = (len(v) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summary(ms):
    return {"n": len(ms),
            "p50_ms": round(percentile(ms, 0.50), 1) if ms else None,
            "p99_ms": round(percentile(ms, 0.99), 1) if ms else None,
            "max_ms": round(max(ms), 1) if ms else None}


class Topology:
    """Leader + standby + ranks on one prefix."""

    def __init__(self, run, etcd, ranks, ttl_ms, generation):
        self.run = run
        self.ranks_n = ranks
        self.ttl_ms = ttl_ms
        self.url = etcd.url("wtx-bench/failover-%s" % uuid.uuid4().hex[:8])
        self.ports = free_ports(2)
        self.gen = generation
        self.journals = [os.path.join(run.dir, "g%d-coordinator-%s" % (generation, n))
                         for n in ("a", "b")]
        self.leader_i = 0
        self.coords = [None, None]
        self.coords[0] = self._coordinator(0, standby=False)
        self.coords[1] = self._coordinator(1, standby=True)
        self.ranks = [run.rank(r, self.ports, self.url,
                               journal=os.path.join(run.dir, "g%d-rank-%d" % (generation, r)))
                      for r in range(ranks)]
        self._registered(self.leader())
        self.prev = None  # (tx, version) of the last commit
        self.seq = 0

    def _coordinator(self, i, standby):
        return self.run.coordinator("%s-g%d" % ("ab"[i], self.gen), self.ports[i], self.url,
                                    ranks=self.ranks_n, standby=standby,
                                    lease_ttl_ms=self.ttl_ms, journal=self.journals[i],
                                    wait_ready=not standby)

    def leader(self):
        return self.coords[self.leader_i]

    def standby(self):
        return self.coords[1 - self.leader_i]

    def _registered(self, c):
        ans = c.ok("wait_ranks", {"ranks": list(range(self.ranks_n)), "timeout_ms": 15000},
                   timeout=25)
        if not ans.get("ok"):
            raise RuntimeError("ranks did not register with %s: %s" % (c.name, ans))

    def tx(self):
        self.seq += 1
        return "g%d-t%d" % (self.gen, self.seq)

    def write(self, tx):
        c = self.leader()
        rc, ans = c.call("begin", wtx_procs.begin_req(tx))
        if rc != 0 or status_code(ans) != "OK":
            raise RoundError("begin %s on %s: %s" % (tx, c.name, ans), c)
        for r in self.ranks:
            r.ok("step", {"step": {"op": "write", "param": "*", "fill": {"seed": self.seq}}})
            r.ok("step", {"step": {"op": "refresh", "derived": "*"}})

    def commit(self, tx):
        self.write(tx)
        rc, ans = self.leader().call("commit", {"tx": tx})
        if rc != 0 or status_code(ans) != "OK":
            raise RoundError("commit %s: %s" % (tx, ans), self.leader())
        self.prev = (tx, ans["version"])

    def close(self):
        for p in self.coords + self.ranks:
            if p is not None:
                p.close()


class RoundError(Exception):
    def __init__(self, message, proc=None):
        super().__init__(message)
        self.stderr = proc.stderr_tail(8) if proc is not None else ""


def poll_until(rank, pred, t_kill, interval, deadline, out, idx):
    """Polls rank status every `interval` s; stores the ms from t_kill to the first status
    that satisfies pred (None on timeout) and the latency of the calls."""
    calls = []
    while True:
        t0 = time.monotonic()
        rc, st = rank.call("status", timeout=5)
        t1 = time.monotonic()
        calls.append(t1 - t0)
        if rc == 0 and pred(st):
            # The state held at some instant within the call; its end bounds it.
            out[idx] = ((t1 - t_kill) * 1000.0, calls)
            return
        if t1 > deadline:
            out[idx] = (None, calls)
            return
        left = interval - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)


def wait_all(topo, pred, t0, interval, timeout, what):
    """Polls every rank until pred holds; the ms from t0 per rank, and the status calls' times."""
    out = [None] * len(topo.ranks)
    threads = [threading.Thread(target=poll_until,
                                args=(r, pred, t0, interval, t0 + timeout, out, i))
               for i, r in enumerate(topo.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_rank = [o[0] for o in out]
    calls = [c for o in out for c in o[1]]
    if any(v is None for v in per_rank):
        raise RoundError("%s: a rank did not hold the outcome within %.0f s" % (what, timeout),
                         topo.ranks[per_rank.index(None)])
    return per_rank, calls


def serving_pred(tx, version):
    return lambda s: (s.get("serving") is True and s.get("committed_tx") == tx and  # noqa
                      s.get("version") == version and s.get("in_doubt") is None and
                      s.get("active_tx") is None)


def leader_fault_round(topo, fault, point, interval, timeout, etcd=None, delay_s=None):
    """kill / pause: the leader dies (or stops) right after its crash point fired. compound:
    killed, and `delay_s` later the etcd raft leader too (the standby takes over during the
    election; it must never exit for a leader that does not exist)."""
    tx = topo.tx()
    topo.write(tx)
    leader = topo.leader()
    leader.ok("arm_crash", {"point": point})
    rc, ans = leader.call("commit", {"tx": tx})
    if not ans or ans.get("crash_fired") is not True:
        raise RoundError("crash point %s did not fire: %s" % (point, ans), leader)
    prev_tx, prev_version = topo.prev
    if point == "after_decision_logged":
        pred = serving_pred(tx, ans["version"])
    else:
        pred = lambda s: (s.get("committed_tx") == prev_tx and  # noqa: E731
                          s.get("version") == prev_version and s.get("in_doubt") is None and
                          s.get("active_tx") is None)
    t0 = time.monotonic()
    leader.kill(signal.SIGKILL) if fault in ("kill", "compound") else leader.signal(
        signal.SIGSTOP)
    etcd_victim = None
    if fault == "compound":
        time.sleep(delay_s)
        etcd_victim = etcd.leader()
        etcd.kill(etcd_victim)
    try:
        per_rank, calls = wait_all(topo, pred, t0, interval, timeout,
                                   "round %s (%s, %s)" % (tx, fault, point))
        new = topo.standby()
        new.wait_ready(timeout)
    finally:
        if fault == "pause":
            leader.signal(signal.SIGCONT)
        if etcd_victim is not None:
            etcd.restart(etcd_victim)
    note = None
    if fault == "pause":
        status = leader.wait_exit(10)
        if status != 4:
            note = "the paused leader exited %s after SIGCONT (expected 4)" % status
            leader.kill(signal.SIGKILL)
    # Takeover: the standby leads; the old leader comes back as the new standby.
    killed_i = topo.leader_i
    topo.leader_i = 1 - killed_i
    topo.coords[killed_i] = topo._coordinator(killed_i, standby=True)
    topo._registered(new)
    if point == "after_decision_logged":
        topo.prev = (tx, ans["version"])
    return per_rank, calls, note


def commit_under_fault_round(topo, etcd, fault, interval, timeout):
    """etcd_leader / standby: the fault, then a commit at once; the wtx leader must stay."""
    tx = topo.tx()
    topo.write(tx)
    leader = topo.leader()
    election = {}
    if fault == "etcd_leader":
        victim = etcd.leader()
        etcd.kill(victim)
        t0 = time.monotonic()
        timer = threading.Thread(target=lambda: election.update(s=etcd.time_to_write(victim)))
        timer.start()
    else:
        victim = topo.standby()
        victim.kill(signal.SIGKILL)
        t0 = time.monotonic()
    rc, ans = leader.call("commit", {"tx": tx})
    if rc != 0 or status_code(ans) != "OK":
        raise RoundError("commit %s under %s: %s" % (tx, fault, ans), leader)
    per_rank, calls = wait_all(topo, serving_pred(tx, ans["version"]), t0, interval, timeout,
                               "round %s (%s)" % (tx, fault))
    topo.prev = (tx, ans["version"])
    note = None
    if not leader.alive():
        raise RoundError("the wtx leader exited under %s" % fault, leader)
    if fault == "etcd_leader":
        timer.join()
        if topo.standby().has_ready_line():
            note = "the standby took over during the etcd election"
        etcd.restart(victim)
    else:
        i = 1 - topo.leader_i
        topo.coords[i] = topo._coordinator(i, standby=True)
    return per_rank, calls, note, election.get("s")


FAULTS = ("kill", "pause", "etcd_leader", "standby", "compound")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40, help="rounds in all, the kinds in turn")
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help="fault kinds to run, comma-separated (%s)" % ", ".join(FAULTS))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--lease-ttl-ms", type=int, default=2000)
    ap.add_argument("--etcd-election-ms", type=int, default=1000,
                    help="etcd's --election-timeout (heartbeat a tenth of it); 1000 is etcd's "
                         "default")
    ap.add_argument("--poll-ms", type=int, default=10)
    ap.add_argument("--timeout-s", type=float, default=30.0,
                    help="give up on a round after this long")
    ap.add_argument("--bin", default=wtx_procs.WTX_BIN)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        print("--faults: unknown kind %s (%s)" % (unknown, ", ".join(FAULTS)), file=sys.stderr)
        return 2
    if not etcd_available():
        print(json.dumps({"skipped": "no etcd binary"}))
        return 77
    work = tempfile.mkdtemp(prefix="wtx-failover-bench-")
    by_fault, by_point, calls, restarts, notes, elections = {}, {}, [], [], [], []
    t_start = time.monotonic()
    election_ms = args.etcd_election_ms
    with EtcdCluster(heartbeat_ms=max(10, election_ms // 10), election_ms=election_ms) as etcd, \
            Run(work, binary=args.bin) as run:
        gen = 0
        topo = None
        i = 0
        while i < args.rounds:
            if topo is None:
                gen += 1
                topo = Topology(run, etcd, args.ranks, args.lease_ttl_ms, gen)
                topo.commit(topo.tx())  # a first version on every rank
            fault = faults[i % len(faults)]
            point = None
            if fault in ("kill", "pause", "compound"):
                n = sum(1 for k in range(i) if faults[k % len(faults)] == fault)
                point = "after_decision_logged" if n % 2 == 0 else "before_decision_logged"
            try:
                if point:
                    # compound: the etcd raft leader dies 0.8 to 2 s after the wtx leader.
                    delay = 0.8 + 1.2 * ((n * 7) % 5) / 4 if fault == "compound" else None
                    per_rank, c, note = leader_fault_round(topo, fault, point,
                                                           args.poll_ms / 1000.0,
                                                           args.timeout_s, etcd, delay)
                else:
                    per_rank, c, note, el = commit_under_fault_round(
                        topo, etcd, fault, args.poll_ms / 1000.0, args.timeout_s)
                    if el is not None:
                        elections.append(el * 1000.0)
            except (RoundError, AssertionError, RuntimeError) as e:
                restarts.append({"round": i, "fault": fault, "point": point,
                                 "error": str(e)[:400],
                                 "stderr": getattr(e, "stderr", "")[-1200:]})
                topo.close()
                topo = None
                if len(restarts) > max(3, args.rounds):
                    break
                continue
            ms = max(per_rank)
            by_fault.setdefault(fault, []).append(ms)
            if point:
                by_point.setdefault("%s/%s" % (fault, point), []).append(ms)
            if note:
                notes.append({"round": i, "fault": fault, "note": note})
            calls.extend(c)
            print("round %d %s%s: last rank after %.1f ms (ranks %s)%s" %
                  (i, fault, " " + point if point else "", ms,
                   ", ".join("%.1f" % v for v in per_rank), " -- " + note if note else ""),
                  file=sys.stderr)
            i += 1
        if topo is not None:
            topo.close()
    goal = args.lease_ttl_ms + 1000
    # Two faults at once (compound): the goal is two lease TTLs and a second.
    goals = {f: (2 * args.lease_ttl_ms + 1000 if f == "compound" else goal) for f in by_fault}
    all_ms = [v for vs in by_fault.values() for v in vs]
    result = {
        "bench": "failover",
        "rounds": len(all_ms),
        "ranks": args.ranks,
        "lease_ttl_ms": args.lease_ttl_ms,
        "etcd_election_timeout_ms": election_ms,
        "goal_ms": goal,
        "fault_to_last_rank_ms": {f: summary(v) for f, v in sorted(by_fault.items())},
        "by_crash_point": {p: summary(v) for p, v in sorted(by_point.items())},
        "goal_ms_by_fault": goals,
        "within_goal": {f: "%d/%d" % (sum(1 for x in v if x <= goals[f]), len(v))
                        for f, v in sorted(by_fault.items())},
        "etcd_election_ms": summary(elections),
        "status_poll_ms": {"interval": args.poll_ms,
                           "call_p50": round(1000 * (percentile(calls, 0.5) or 0), 1),
                           "call_max": round(1000 * max(calls), 1) if calls else None},
        "notes": notes,
        "restarts": restarts,
        "wall_s": round(time.monotonic() - t_start, 1),
    }
    print(json.dumps(result, indent=1))
    if args.keep:
        print("work folder: " + work, file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all_ms and not notes else 1


if __name__ == "__main__":
    sys.exit(main())
