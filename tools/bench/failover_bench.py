#!/usr/bin/env python3
"""Failover latency of `wtx coordinator` over an etcd decision log (issue 27).

Starts a 3-member etcd cluster on loopback (tests/etcd/etcd_cluster.py), a leader and a
standby coordinator (--test-hooks: the build tree's wtx) and R ranks on the tiny manifest that
list both (--connect A,B --decision-log URL). Then, --kills times: a full transaction is
written on every rank and committed with the leader's crash point armed
(after_decision_logged and before_decision_logged in turn); the commit answers E_CRASHED and
the leader is killed with SIGKILL. The clock runs from the kill to the moment the LAST rank
holds the decided outcome, polled on every rank's control port every 10 ms:

  * after_decision_logged (commit): the rank serves the new version (serving, committed_tx,
    version, nothing in doubt or active);
  * before_decision_logged (abort): the rank holds the previous commit with nothing in doubt
    or active (an aborted full transaction keeps no before-images: the rank serves again
    after the next full transaction).

The killed leader is restarted on its journal and port as the new standby, so the leadership
alternates between the two. Prints one JSON document: p50/p99/max (ms) over all rounds and
per crash point, the lease TTL, and the goal (TTL + 1000 ms).

A round that cannot go on (the new leader refuses `begin`, e.g. its recovery failed) is
counted in "restarts" with its error, and the whole topology is started again on a fresh
prefix and fresh journals.

    /usr/bin/python3 tools/bench/failover_bench.py --kills 50 --ranks 2 --lease-ttl-ms 1000
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


def one_round(topo, point, interval, timeout):
    tx = topo.tx()
    topo.write(tx)
    leader = topo.leader()
    leader.ok("arm_crash", {"point": point})
    rc, ans = leader.call("commit", {"tx": tx})
    if not ans or ans.get("crash_fired") is not True:
        raise RoundError("crash point %s did not fire: %s" % (point, ans), leader)
    prev_tx, prev_version = topo.prev
    if point == "after_decision_logged":
        version = ans["version"]
        pred = lambda s: (s.get("serving") is True and s.get("committed_tx") == tx and  # noqa
                          s.get("version") == version and s.get("in_doubt") is None and
                          s.get("active_tx") is None)
    else:
        pred = lambda s: (s.get("committed_tx") == prev_tx and  # noqa: E731
                          s.get("version") == prev_version and s.get("in_doubt") is None and
                          s.get("active_tx") is None)
    t_kill = time.monotonic()
    leader.kill(signal.SIGKILL)
    out = [None] * len(topo.ranks)
    threads = [threading.Thread(target=poll_until,
                                args=(r, pred, t_kill, interval, t_kill + timeout, out, i))
               for i, r in enumerate(topo.ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    per_rank = [o[0] for o in out]
    calls = [c for o in out for c in o[1]]
    if any(v is None for v in per_rank):
        raise RoundError("round %s (%s): a rank did not hold the outcome within %.0f s" %
                         (tx, point, timeout), topo.ranks[per_rank.index(None)])
    # Takeover: the standby leads; the killed leader comes back as the new standby.
    new = topo.standby()
    new.wait_ready(timeout)
    took_over_ms = None  # the ready line is read after the fact: no precise time
    killed_i = topo.leader_i
    topo.leader_i = 1 - killed_i
    topo.coords[killed_i] = topo._coordinator(killed_i, standby=True)
    topo._registered(new)
    if point == "after_decision_logged":
        topo.prev = (tx, ans["version"])
    return max(per_rank), per_rank, calls, took_over_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--lease-ttl-ms", type=int, default=1000)
    ap.add_argument("--poll-ms", type=int, default=10)
    ap.add_argument("--timeout-s", type=float, default=30.0,
                    help="give up on a round after this long")
    ap.add_argument("--bin", default=wtx_procs.WTX_BIN)
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    if not etcd_available():
        print(json.dumps({"skipped": "no etcd binary"}))
        return 77
    work = tempfile.mkdtemp(prefix="wtx-failover-bench-")
    all_ms, by_point, calls, restarts = [], {}, [], []
    t_start = time.monotonic()
    with EtcdCluster() as etcd, Run(work, binary=args.bin) as run:
        gen = 0
        topo = None
        i = 0
        while i < args.kills:
            if topo is None:
                gen += 1
                topo = Topology(run, etcd, args.ranks, args.lease_ttl_ms, gen)
                topo.commit(topo.tx())  # a first version on every rank
            point = "after_decision_logged" if i % 2 == 0 else "before_decision_logged"
            try:
                ms, per_rank, c, _ = one_round(topo, point, args.poll_ms / 1000.0,
                                               args.timeout_s)
            except (RoundError, AssertionError, RuntimeError) as e:
                restarts.append({"round": i, "point": point, "error": str(e)[:400],
                                 "stderr": getattr(e, "stderr", "")[-1200:]})
                topo.close()
                topo = None
                if len(restarts) > max(3, args.kills):
                    break
                continue
            all_ms.append(ms)
            by_point.setdefault(point, []).append(ms)
            calls.extend(c)
            print("round %d %s: last rank after %.1f ms (ranks %s)" %
                  (i, point, ms, ", ".join("%.1f" % v for v in per_rank)), file=sys.stderr)
            i += 1
        if topo is not None:
            topo.close()
    goal = args.lease_ttl_ms + 1000
    result = {
        "bench": "failover",
        "kills": len(all_ms),
        "ranks": args.ranks,
        "lease_ttl_ms": args.lease_ttl_ms,
        "goal_ms": goal,
        "kill_to_last_rank_ms": summary(all_ms),
        "by_crash_point": {p: summary(v) for p, v in sorted(by_point.items())},
        "within_goal": sum(1 for v in all_ms if v <= goal),
        "status_poll_ms": {"interval": args.poll_ms,
                           "call_p50": round(1000 * (percentile(calls, 0.5) or 0), 1),
                           "call_max": round(1000 * max(calls), 1) if calls else None},
        "restarts": restarts,
        "wall_s": round(time.monotonic() - t_start, 1),
    }
    print(json.dumps(result, indent=1))
    if args.keep:
        print("work folder: " + work, file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all_ms else 1


if __name__ == "__main__":
    sys.exit(main())
