"""Coordinator failover over an etcd decision log (issue 27), process level.

Real processes only: a 3-member etcd cluster on loopback (etcd_cluster.py), `wtx coordinator`
leaders and standbys, `wtx rank` processes on the tiny manifest, driven by `wtx control` calls
(wtx_procs.py). Crash points need the build tree's wtx (--test-hooks): $WTX_BIN, default
/work/main/build/bin/wtx. The run exits 77 (skipped) only when there is no etcd binary.

Each case checks what docs/protocol.md promises: a standby takes over within the lease TTL plus
about a second, decisions logged by a dead leader are applied, undecided transactions are
aborted (by the new leader, or cooperatively by the ranks when no coordinator leads), a paused
leader is fenced and exits with status 4, a decision log without quorum refuses commits without
losing earlier ones, and foreign data under the prefix is refused by name.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd_cluster import EtcdCluster, etcd_available  # noqa: E402
from wtx_procs import (MANIFEST, WTX_BIN, Run, begin_req, free_port, free_ports,  # noqa: E402
                       status_code, wait_for)

if not etcd_available():
    # Exit 77: CTest reports the run as skipped (SKIP_RETURN_CODE), never as passed.
    pytest.exit("no etcd binary (/usr/bin/etcd, $WTX_ETCD_BINARY or etcd on PATH): the etcd "
                "failover tests need a real cluster", returncode=77)

TTL_MS = 1000
DEFAULT_TTL_MS = 2000  # `wtx coordinator`'s default --lease-ttl-ms
RANKS = 2
# Bounds are behaviour, not speed (issue 45): a fault must resolve, well before a bound several
# times the lease TTL that holds on a loaded 2-core machine. Latency against the goal (TTL + 1 s)
# is measured by tools/bench/failover_bench.py (p50/p99/max per fault kind), never asserted.
LOADED_FACTOR = 3


def loaded_bound_s(ttl_ms):
    """Seconds within which a fault with lease TTL ttl_ms must be resolved on a loaded machine."""
    return LOADED_FACTOR * (ttl_ms / 1000 + 1)


# -- fixtures --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def etcd():
    with EtcdCluster() as cluster:
        yield cluster


@pytest.fixture
def own_etcd():
    """A cluster of its own, for the cases that kill members."""
    with EtcdCluster() as cluster:
        yield cluster


@pytest.fixture
def default_etcd():
    """A cluster with etcd's own election settings (heartbeat 100 ms, election timeout 1 s), as
    a user runs it: the slowest elections the defaults must ride out."""
    with EtcdCluster(heartbeat_ms=100, election_ms=1000) as cluster:
        yield cluster


@pytest.fixture
def run(tmp_path):
    # The binary may be relinked meanwhile: wait a moment for it.
    assert wait_for(lambda: os.access(WTX_BIN, os.X_OK), 60, 0.5), \
        "no wtx binary at %s (set WTX_BIN)" % WTX_BIN
    with Run(tmp_path) as r:
        yield r


def prefix(name):
    return "wtx-failover/%s-%s" % (name, uuid.uuid4().hex[:8])


# -- helpers ---------------------------------------------------------------------------------

def states(ranks):
    return [r.ok("status") for r in ranks]


def wait_states(ranks, pred, timeout):
    """Polls the ranks' statuses until pred(status) holds for every rank; returns (ok, the
    last statuses, seconds waited)."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        st = []
        for r in ranks:
            rc, answer = r.call("status", timeout=5)
            st.append(answer if rc == 0 else {"error": answer})
        if all(pred(s) for s in st):
            return True, st, time.monotonic() - t0
        if time.monotonic() >= deadline:
            return False, st, time.monotonic() - t0
        time.sleep(0.05)


def aborted_back_to(tx, version):
    """Aborted: nothing in doubt or active, the previous commit's version kept. (An aborted
    *full* transaction keeps no before-images: the rank is dirty and does not serve until the
    next full transaction commits; only partial/delta transactions roll back.)"""
    return lambda s: (s.get("committed_tx") == tx and s.get("version") == version and
                      s.get("in_doubt") is None and s.get("active_tx") is None)


def serving(tx, version):
    return lambda s: (s.get("serving") is True and s.get("committed_tx") == tx and
                      s.get("version") == version and s.get("in_doubt") is None and
                      s.get("active_tx") is None)


def log_json(run, url):
    out = run.cli("log", "--decision-log", url, "--json")
    assert out.returncode == 0, "wtx log --decision-log %s: exit %d\n%s%s" % (
        url, out.returncode, out.stdout, out.stderr)
    return json.loads(out.stdout)


def leader_and_standby(run, etcd_cluster, name, ranks=RANKS, ttl_ms=TTL_MS, a_extra=(),
                       b_extra=()):
    """Leader A (ready), standby B (waiting), ranks connected to A then B; every rank
    registered with A."""
    url = etcd_cluster.url(prefix(name))
    pa, pb = free_ports(2)
    a = run.coordinator("a", pa, url, ranks=ranks, lease_ttl_ms=ttl_ms, extra=a_extra)
    b = run.coordinator("b", pb, url, ranks=ranks, lease_ttl_ms=ttl_ms, standby=True,
                        wait_ready=False, extra=b_extra)
    rs = [run.rank(i, [pa, pb], url) for i in range(ranks)]
    assert run.wait_ranks(a, ranks)["ok"], run.stderr_tails()
    return url, a, b, rs


def commit_ok(coordinator, tx):
    answer = coordinator.ok("commit", {"tx": tx})
    assert status_code(answer) == "OK" and answer["decision"] == "commit", \
        "commit %s: %s\n%s" % (tx, answer, coordinator.stderr_tail())
    return answer["version"]


def crash_commit(coordinator, tx, point):
    """Arms `point` on the coordinator, commits `tx` (the call answers E_CRASHED: the
    coordinator is dead from then on), and kills it with SIGKILL, as the simulator does.
    Returns the commit answer and the time of the kill."""
    coordinator.ok("arm_crash", {"point": point})
    rc, answer = coordinator.call("commit", {"tx": tx})
    assert answer and answer.get("crash_fired") is True, \
        "crash point %s did not fire: exit %d, %s\n%s" % (point, rc, answer,
                                                          coordinator.stderr_tail())
    killed_at = time.monotonic()
    coordinator.kill(signal.SIGKILL)
    return answer, killed_at


def begin_ok(coordinator, tx, rollback=False):
    rc, answer = coordinator.call("begin", begin_req(tx, rollback=rollback))
    assert rc == 0 and status_code(answer) == "OK", \
        "begin %s on %s: exit %d, %s\n%s" % (tx, coordinator.name, rc, answer,
                                             coordinator.stderr_tail())
    return answer


# -- cases -----------------------------------------------------------------------------------

def test_standby_takes_over_after_leader_killed_after_decision(etcd, run):
    url, a, b, rs = leader_and_standby(run, etcd, "after")
    run.full_tx(a, rs, "t1", seed=1)
    commit_ok(a, "t1")
    run.full_tx(a, rs, "t2", seed=2)
    answer, killed_at = crash_commit(a, "t2", "after_decision_logged")
    assert answer["decision"] == "commit" and answer["decision_logged"] is True, answer
    v2 = answer["version"]

    b.wait_ready(TTL_MS / 1000 + 5)
    took = time.monotonic() - killed_at
    assert took < loaded_bound_s(TTL_MS), "standby took %.2f s to lead\n%s" % (
        took, run.stderr_tails())
    assert b.ready["epoch"] > a.ready["epoch"], (a.ready, b.ready)

    ok, st, waited = wait_states(rs, serving("t2", v2), 10)
    assert ok, "ranks do not serve t2 (%s): %s\n%s" % (v2, st, run.stderr_tails())

    decisions = log_json(run, url)
    t2 = [d for d in decisions if d["tx"] == "t2"]
    assert len(t2) == 1 and t2[0]["decision"] == "commit" and t2[0]["version"] == v2, decisions
    # The new leader goes on once the ranks found it (they may have resolved from etcd first).
    assert run.wait_ranks(b, RANKS)["ok"], run.stderr_tails()
    run.full_tx(b, rs, "t3", seed=3)
    v3 = commit_ok(b, "t3")
    ok, st, _ = wait_states(rs, serving("t3", v3), 5)
    assert ok, st
    # The new leader re-sent t2's decision to every rank: it ends in the log.
    assert wait_for(lambda: all(d["ended"] for d in log_json(run, url)), 5), \
        "t2 never marked ended in etcd by the new leader: %s\n%s" % (log_json(run, url),
                                                                    b.stderr_tail())


def test_standby_takes_over_after_leader_killed_before_decision(etcd, run):
    url, a, b, rs = leader_and_standby(run, etcd, "before")
    run.full_tx(a, rs, "t1", seed=1)
    v1 = commit_ok(a, "t1")
    run.full_tx(a, rs, "t2", seed=2)
    answer, killed_at = crash_commit(a, "t2", "before_decision_logged")
    assert answer["decision_logged"] is False, answer

    b.wait_ready(TTL_MS / 1000 + 5)
    took = time.monotonic() - killed_at
    assert took < loaded_bound_s(TTL_MS), "standby took %.2f s to lead\n%s" % (
        took, run.stderr_tails())

    # Aborted everywhere: nobody in doubt, the previous version kept.
    ok, st, _ = wait_states(rs, aborted_back_to("t1", v1), 10)
    assert ok, "ranks did not end aborted on t1's version %s: %s\n%s" % (v1, st,
                                                                         run.stderr_tails())
    t2 = [d for d in log_json(run, url) if d["tx"] == "t2"]
    assert all(d["decision"] == "abort" for d in t2), t2

    # A new transaction begins on B (no E_TX_ACTIVE left by t2) and commits.
    assert run.wait_ranks(b, RANKS)["ok"], run.stderr_tails()
    begin_ok(b, "t3")
    for r in rs:
        r.ok("step", {"step": {"op": "write", "param": "*", "fill": {"seed": 3}}})
        r.ok("step", {"step": {"op": "refresh", "derived": "*"}})
    v3 = commit_ok(b, "t3")
    ok, st, _ = wait_states(rs, serving("t3", v3), 5)
    assert ok, st


@pytest.mark.parametrize("log", ["journal", "etcd"])
def test_coordinator_killed_between_begin_and_commit_leaves_no_active_tx(etcd, run, log):
    if log == "journal":
        pa = free_port()
        a = run.coordinator("a", pa)
        rs = [run.rank(i, [pa]) for i in range(RANKS)]
        assert run.wait_ranks(a, RANKS)["ok"], run.stderr_tails()
    else:
        url, a, b, rs = leader_and_standby(run, etcd, "between")
    run.full_tx(a, rs, "t1", seed=1)
    v1 = commit_ok(a, "t1")
    run.full_tx(a, rs, "t2", seed=2)  # begun and written, never committed
    a.kill(signal.SIGKILL)

    if log == "journal":  # the same coordinator again, on its journal and port
        nxt = run.coordinator("a", pa, journal=a.args[a.args.index("--journal") + 1])
        assert run.wait_ranks(nxt, RANKS)["ok"], run.stderr_tails()
    else:
        b.wait_ready(TTL_MS / 1000 + 5)
        nxt = b
    # The orphan t2 is aborted on every rank once they registered with the new coordinator.
    ok, st, _ = wait_states(rs, aborted_back_to("t1", v1), 10)
    assert ok, "t2 left active or in doubt: %s\n%s" % (st, run.stderr_tails())
    assert run.wait_ranks(nxt, RANKS)["ok"], run.stderr_tails()
    begin_ok(nxt, "t3")
    for r in rs:
        r.ok("step", {"step": {"op": "write", "param": "*", "fill": {"seed": 3}}})
        r.ok("step", {"step": {"op": "refresh", "derived": "*"}})
    v3 = commit_ok(nxt, "t3")
    ok, st, _ = wait_states(rs, serving("t3", v3), 5)
    assert ok, st


@pytest.mark.parametrize("point", ["after_decision_logged", "before_decision_logged"])
def test_ranks_resolve_from_etcd_with_every_coordinator_dead(etcd, run, point):
    url = etcd.url(prefix("nocoord"))
    pa = free_port()
    a = run.coordinator("a", pa, url, lease_ttl_ms=TTL_MS)
    rs = [run.rank(i, [pa], url) for i in range(RANKS)]
    assert run.wait_ranks(a, RANKS)["ok"], run.stderr_tails()
    run.full_tx(a, rs, "t1", seed=1)
    v1 = commit_ok(a, "t1")
    run.full_tx(a, rs, "t2", seed=2)
    answer, killed_at = crash_commit(a, "t2", point)
    if point == "after_decision_logged":
        want = serving("t2", answer["version"])
    else:
        want = aborted_back_to("t1", v1)
    ok, st, waited = wait_states(rs, want, TTL_MS / 1000 + 4)
    assert ok, "ranks did not resolve t2 from etcd (%s) within %.1f s: %s\n%s" % (
        point, waited, st, run.stderr_tails())
    t2 = [d for d in log_json(run, url) if d["tx"] == "t2"]
    assert len(t2) == 1, t2
    if point == "after_decision_logged":
        assert t2[0]["decision"] == "commit", t2
    else:
        assert t2[0]["decision"] == "abort", t2  # the ranks' cooperative abort


def test_paused_leader_is_fenced(etcd, run):
    url, a, b, rs = leader_and_standby(run, etcd, "paused")
    run.full_tx(a, rs, "t1", seed=1)
    commit_ok(a, "t1")
    problems = []  # gathered, so that one failure does not hide the next
    a.signal(signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        b.wait_ready(TTL_MS / 1000 + 5)
        assert b.ready["epoch"] > a.ready["epoch"], (a.ready, b.ready)
        # The ranks leave the paused leader for B: its connections stay open (the kernel
        # answers for it), but it answers nothing and no longer leads.
        rc, answer = b.call("wait_ranks", {"ranks": list(range(RANKS)), "timeout_ms": 8000},
                            timeout=20)
        if not (rc == 0 and answer.get("ok") is True):
            problems.append("the ranks did not register with the new leader B within %.1f s of "
                            "pausing A (wait_ranks: %s)" % (time.monotonic() - paused_at,
                                                            answer))
    finally:
        a.signal(signal.SIGCONT)
    status = a.wait_exit(5)
    if status != 4:
        problems.append("the paused leader did not exit with status 4 within 5 s of SIGCONT "
                        "(status %s)" % status)
    elif "lost the leadership" not in a.stderr_text():
        problems.append("A exited 4 without saying it lost the leadership")
    rc, answer = b.call("wait_ranks", {"ranks": list(range(RANKS)), "timeout_ms": 5000},
                        timeout=15)
    assert not problems and rc == 0 and answer.get("ok") is True, \
        "%s; after SIGCONT wait_ranks on B: %s\n%s" % (problems, answer, run.stderr_tails())
    run.full_tx(b, rs, "t2", seed=2)
    v2 = commit_ok(b, "t2")
    ok, st, _ = wait_states(rs, serving("t2", v2), 5)
    assert ok, st
    decisions = log_json(run, url)
    t2 = [d for d in decisions if d["tx"] == "t2"]
    assert len(t2) == 1 and t2[0]["epoch"] == b.ready["epoch"], decisions
    # Nothing after the pause was written by A's epoch.
    assert all(d["epoch"] == b.ready["epoch"] for d in decisions if d["tx"] != "t1"), decisions


def etcd_leader(cluster):
    """The index of the member that leads the etcd cluster."""
    return cluster.leader()


# A follower killed: nothing changes for the coordinator (its lease renewals go to the next
# member). The etcd leader killed: etcd elects another (election timeout 500 ms here) and
# the coordinator keeps leading with the default lease TTL (2 s); with a 1 s TTL a renewal
# stalled by the election can outlast what Leads() trusts, and the coordinator is deposed
# (a standby would take over) -- not what this case checks.
@pytest.mark.parametrize("member,ttl_ms", [("follower", TTL_MS), ("leader", 2000)])
def test_one_etcd_member_killed_commits_go_on(own_etcd, run, member, ttl_ms):
    url, a, b, rs = leader_and_standby(run, own_etcd, "onedown", ttl_ms=ttl_ms)
    run.full_tx(a, rs, "t1", seed=1)
    commit_ok(a, "t1")
    leader = etcd_leader(own_etcd)
    victim = leader if member == "leader" else (leader + 1) % own_etcd.size()
    own_etcd.kill(victim)
    for i, tx in enumerate(["t2", "t3"]):
        run.full_tx(a, rs, tx, seed=2 + i)
        v = commit_ok(a, tx)
        ok, st, _ = wait_states(rs, serving(tx, v), 5)
        assert ok, st
    assert a.alive(), a.stderr_tail()
    assert not b.has_ready_line(), "the standby took over: %s\n%s" % (b.ready, run.stderr_tails())
    own_etcd.restart(victim)
    txs = [d["tx"] for d in log_json(run, url)]
    assert txs.count("t1") == 1 and txs.count("t2") == 1 and txs.count("t3") == 1, txs


def test_two_etcd_members_killed_commits_refused(own_etcd, run):
    # A lease longer than the commit's bounded failure, so that A still leads when it answers.
    ttl = 5000
    url, a, b, rs = leader_and_standby(
        run, own_etcd, "twodown", ttl_ms=ttl,
        a_extra=("--decision-log-timeout-ms", "300"), b_extra=("--decision-log-timeout-ms", "300"))
    run.full_tx(a, rs, "t1", seed=1)
    v1 = commit_ok(a, "t1")
    run.full_tx(a, rs, "t2", seed=2)
    own_etcd.kill(1)
    own_etcd.kill(2)
    t0 = time.monotonic()
    rc, answer = a.call("commit", {"tx": "t2"}, timeout=30)
    took = time.monotonic() - t0
    # One decision-log timeout (300 ms), not the TTL: bounded well below a hang.
    assert took < loaded_bound_s(ttl), "commit without quorum took %.1f s" % took
    assert answer is not None and "E_DECISION_LOG_UNAVAILABLE" in json.dumps(answer), \
        "commit without quorum: exit %d, %s\n%s" % (rc, answer, a.stderr_tail())
    assert answer.get("decision") in (None, "abort") or answer.get("decision_logged") is False, \
        answer
    # Prepared ranks stay in doubt and do not serve (nothing could be decided).
    time.sleep(0.5)
    for s in states(rs):
        assert s["serving"] is False and (s["in_doubt"] == "t2" or s["active_tx"] == "t2"), s

    own_etcd.restart(1)
    own_etcd.restart(2)
    # Resolved one way on every rank: committed t2, or aborted back to t1's version.
    def resolved(s):
        return s.get("in_doubt") is None and s.get("active_tx") is None and \
            (s.get("committed_tx") == "t1" or
             (s.get("committed_tx") == "t2" and s.get("serving") is True))
    ok, st, waited = wait_states(rs, resolved, 2 * ttl / 1000 + 5)
    assert ok, "ranks still in doubt %.1f s after etcd got its quorum back: %s\n%s" % (
        waited, st, run.stderr_tails())
    assert len({(s["committed_tx"], s["version"]) for s in st}) == 1, st
    decisions = log_json(run, url)
    t1 = [d for d in decisions if d["tx"] == "t1"]
    assert len(t1) == 1 and t1[0]["decision"] == "commit" and t1[0]["version"] == v1, decisions
    t2 = [d for d in decisions if d["tx"] == "t2"]
    assert len(t2) <= 1, decisions
    if st[0]["committed_tx"] == "t2":
        assert t2 and t2[0]["decision"] == "commit", decisions
    else:
        assert not t2 or t2[0]["decision"] == "abort", decisions


def test_foreign_value_under_prefix_is_refused(etcd, run):
    endpoints = ",".join("http://" + etcd.endpoint(i) for i in range(etcd.size()))
    env = dict(os.environ, ETCDCTL_API="3")

    def etcdctl_put(key, value):
        out = subprocess.run(["etcdctl", "--endpoints=" + endpoints, "put", key, value],
                             env=env, capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr

    # A foreign value under PREFIX/tx/: wtx log refuses, naming the key.
    p = prefix("foreign-tx")
    url = etcd.url(p)
    pa = free_port()
    a = run.coordinator("a", pa, url)
    rs = [run.rank(i, [pa], url) for i in range(RANKS)]
    assert run.wait_ranks(a, RANKS)["ok"], run.stderr_tails()
    run.full_tx(a, rs, "t1", seed=1)
    commit_ok(a, "t1")
    etcdctl_put(p + "/tx/x", "garbage")
    out = run.cli("log", "--decision-log", url)
    assert out.returncode != 0, "wtx log accepted garbage at %s/tx/x:\n%s" % (p, out.stdout)
    assert p + "/tx/x" in out.stderr, out.stderr

    # A foreign PREFIX/meta: the coordinator refuses to start, naming the key.
    p2 = prefix("foreign-meta")
    etcdctl_put(p2 + "/meta", "garbage")
    t0 = time.monotonic()
    out = run.cli("coordinator", "--listen", "127.0.0.1:%d" % free_port(), "--journal",
                  os.path.join(run.dir, "coordinator-meta"), "--secret-file", run.secret,
                  "--ranks", "1", "--decision-log", etcd.url(p2), "--lease-ttl-ms", "1000",
                  "--leader-wait-ms", "500", timeout=30)
    assert out.returncode != 0, out.stdout
    assert p2 + "/meta" in out.stderr, out.stderr
    assert '"ready":true' not in out.stdout.replace(" ", ""), out.stdout

    # Unreachable etcd: refused quickly, naming the endpoint.
    dead = free_ports(2)
    dead_url = "etcd://%s/wtx" % ",".join("127.0.0.1:%d" % port for port in dead)
    t0 = time.monotonic()
    out = run.cli("coordinator", "--listen", "127.0.0.1:%d" % free_port(), "--journal",
                  os.path.join(run.dir, "coordinator-dead"), "--secret-file", run.secret,
                  "--ranks", "1", "--decision-log", dead_url, "--decision-log-timeout-ms", "300",
                  "--leader-wait-ms", "500", timeout=30)
    took = time.monotonic() - t0
    assert out.returncode != 0, out.stdout
    assert any("127.0.0.1:%d" % port in out.stderr for port in dead), out.stderr
    assert took < 15, "refusing an unreachable etcd took %.1f s" % took


def test_journal_tools_read_the_decision_log_and_check_finds_disagreement(etcd, run):
    """wtx log/show/status --decision-log read etcd; wtx check DIR --decision-log compares a
    coordinator's audit journal with it and reports a decision they hold differently."""
    endpoints = ",".join("http://" + etcd.endpoint(i) for i in range(etcd.size()))
    p = prefix("tools")
    url = etcd.url(p)
    pa = free_port()
    a = run.coordinator("a", pa, url)
    rs = [run.rank(i, [pa], url) for i in range(RANKS)]
    assert run.wait_ranks(a, RANKS)["ok"], run.stderr_tails()
    run.full_tx(a, rs, "t1", seed=1)
    v1 = commit_ok(a, "t1")
    run.full_tx(a, rs, "t2", seed=2)
    commit_ok(a, "t2")

    text = run.cli("log", "--decision-log", url)
    assert text.returncode == 0, text.stderr
    assert "t1" in text.stdout and "t2" in text.stdout and "commit" in text.stdout
    show = run.cli("show", "--decision-log", url, "t1", "--json")
    assert show.returncode == 0, show.stderr
    d = json.loads(show.stdout)
    assert d["decision"] == "commit" and d["version"] == v1 and d["epoch"] == a.ready["epoch"]
    missing = run.cli("show", "--decision-log", url, "nope")
    assert missing.returncode == 1 and "nope" in missing.stderr
    status = run.cli("status", "--decision-log", url, "--json")
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)
    assert st["decisions"] == 2 and st["leader"]["epoch"] == a.ready["epoch"]

    audit = os.path.join(run.dir, "coordinator-a")
    ok = run.cli("check", audit, "--decision-log", url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "agree" in ok.stdout

    # etcd now says t1 aborted: the audit journal disagrees, and check names the transaction.
    record = {"format": "wtx-decision", "v": 1, "tx": "t1", "decision": "abort", "version": "",
              "reason": "rewritten by the test", "writer": "test", "epoch": 1,
              "time_micros": 1, "votes": []}
    out = subprocess.run(["etcdctl", "--endpoints=" + endpoints, "put", p + "/tx/t1",
                          json.dumps(record)], env=dict(os.environ, ETCDCTL_API="3"),
                         capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert run.cli("show", "--decision-log", url, "t1", "--json").returncode == 0
    bad = run.cli("check", audit, "--decision-log", url)
    assert bad.returncode == 3, bad.stdout + bad.stderr
    assert "'t1'" in bad.stderr and "disagree" in bad.stderr

    # An unreachable log: exit 4, naming the endpoint.
    dead = "etcd://127.0.0.1:%d/x" % free_port()
    gone = run.cli("log", "--decision-log", dead, "--decision-log-timeout-ms", "300")
    assert gone.returncode == 4 and "127.0.0.1" in gone.stderr, gone.stderr


def test_rank_with_an_unreachable_decision_log_starts_and_says_so(run):
    """A rank needs the log only to resolve without a coordinator: it starts, naming the
    endpoint it cannot reach; a malformed url refuses the start, naming the part."""
    pa = free_port()
    a = run.coordinator("a", pa)
    dead = "etcd://127.0.0.1:%d/wtx" % free_port()
    r = run.rank(0, [pa], dead, extra=("--decision-log-timeout-ms", "200"))
    assert run.wait_ranks(a, 1)["ok"], run.stderr_tails()
    assert "does not answer yet" in r.stderr_text() and dead.split("/")[2] in r.stderr_text()
    bad = run.cli("rank", "--connect", "127.0.0.1:%d" % pa, "--rank", "1", "--journal",
                  os.path.join(run.dir, "rank-bad"), "--secret-file", run.secret,
                  "--manifest", MANIFEST, "--decision-log", "etcd://127.0.0.1/wtx")
    assert bad.returncode == 2 and "port" in bad.stderr, bad.stderr


# -- issue 36: failover that never stalls ----------------------------------------------------

@pytest.mark.parametrize("point", ["after_decision_logged", "before_decision_logged"])
def test_paused_leader_in_doubt_ranks_resolve(etcd, run, point):
    # The leader is paused (SIGSTOP) for longer than its lease TTL with the ranks in doubt: its
    # kernel still accepts connections, so a rank that redials it must not wait out a TLS
    # handshake; it bounds each attempt by its heartbeat budget and reads the decision log (and
    # who leads it) beside the attempts.
    url, a, b, rs = leader_and_standby(run, etcd, "pause-" + point[:5], ttl_ms=DEFAULT_TTL_MS)
    run.full_tx(a, rs, "t1", seed=1)
    v1 = commit_ok(a, "t1")
    run.full_tx(a, rs, "t2", seed=2)
    a.ok("arm_crash", {"point": point})
    rc, answer = a.call("commit", {"tx": "t2"})
    assert answer and answer.get("crash_fired") is True, (rc, answer, a.stderr_tail())
    a.signal(signal.SIGSTOP)
    paused_at = time.monotonic()
    try:
        pred = (serving("t2", answer["version"]) if point == "after_decision_logged"
                else aborted_back_to("t1", v1))
        ok, st, _ = wait_states(rs, pred, 20)
        resolved_s = time.monotonic() - paused_at
        # Paused for longer than the TTL whatever happened.
        time.sleep(max(0.0, DEFAULT_TTL_MS / 1000 + 0.5 - (time.monotonic() - paused_at)))
    finally:
        a.signal(signal.SIGCONT)
    assert ok, "ranks did not resolve: %s\n%s" % (st, run.stderr_tails())
    # Resolved, within a bound that holds on a loaded machine; the goal (TTL + 1 s) is the
    # bench's (tools/bench/failover_bench.py reports it per fault kind).
    bound_s = loaded_bound_s(DEFAULT_TTL_MS)
    print("%s: every rank resolved %.3f s after the pause (goal %.1f s, bound %.1f s)" % (
        point, resolved_s, (DEFAULT_TTL_MS + 1000) / 1000, bound_s))
    assert resolved_s <= bound_s, "resolved %.2f s after the pause (bound %.1f s)\n%s" % (
        resolved_s, bound_s, run.stderr_tails())
    assert a.wait_exit(10) == 4, a.stderr_tail()


def test_etcd_raft_leader_killed_wtx_leader_keeps_leading(default_etcd, run):
    # Three times: kill the etcd raft leader (etcd's default election settings), measure the
    # election, and check that the wtx leader never stopped leading (its renewals retry across
    # members within the TTL) and commits on.
    url, a, b, rs = leader_and_standby(run, default_etcd, "raftleader", ttl_ms=DEFAULT_TTL_MS)
    run.full_tx(a, rs, "t0", seed=1)
    commit_ok(a, "t0")
    elections = []
    for n in range(3):
        victim = default_etcd.leader()
        default_etcd.kill(victim)
        elections.append(default_etcd.time_to_write(victim))
        tx = "t%d" % (n + 1)
        run.full_tx(a, rs, tx, seed=2 + n)
        v = commit_ok(a, tx)
        ok, st, _ = wait_states(rs, serving(tx, v), 5)
        assert ok, st
        # (It may not lead for a moment while a renewal waits out the election, and leads
        # again once one lands: the lease was never lost.)
        lead = wait_for(lambda: (lambda ans: ans if ans["leads"] else None)(a.ok("leader")),
                        DEFAULT_TTL_MS / 1000)
        assert lead and lead["epoch"] == a.ready["epoch"], (lead, a.stderr_tail())
        default_etcd.restart(victim)
    assert a.alive(), a.stderr_tail()
    assert "lost the leadership" not in a.stderr_text(), a.stderr_tail()
    assert not b.has_ready_line(), "the standby took over: %s\n%s" % (b.ready, run.stderr_tails())
    assert all(e is not None for e in elections), elections
    print("etcd elections (s): %s" % ", ".join("%.3f" % e for e in elections))


@pytest.mark.parametrize("delay_s", [0.5, 1.5])
def test_standby_takes_over_during_an_etcd_election(default_etcd, run, delay_s):
    # The leader dies and, while its lease runs out, the etcd raft leader dies too: the standby
    # takes over during (or right after) the election. It must retry, not exit before its ready
    # line (it exited 1 with "E_STALE_COORDINATOR ... is not held").
    url, a, b, rs = leader_and_standby(run, default_etcd, "takeover-%d" % int(delay_s * 10),
                                       ttl_ms=DEFAULT_TTL_MS)
    run.full_tx(a, rs, "t1", seed=1)
    commit_ok(a, "t1")
    a.kill(signal.SIGKILL)
    time.sleep(delay_s)
    default_etcd.kill(default_etcd.leader())
    b.wait_ready(20)
    assert b.alive(), b.stderr_tail()
    assert run.wait_ranks(b, RANKS)["ok"], run.stderr_tails()
    run.full_tx(b, rs, "t2", seed=2)
    v2 = commit_ok(b, "t2")
    ok, st, _ = wait_states(rs, serving("t2", v2), 10)
    assert ok, st


def test_control_finds_the_leader_and_status_reconciles_an_audit_journal(etcd, run):
    url, a, b, rs = leader_and_standby(run, etcd, "control")
    run.full_tx(a, rs, "t1", seed=1)
    commit_ok(a, "t1")
    # Before the failover: the call goes to A, the first that leads.
    both = "127.0.0.1:%d,127.0.0.1:%d" % (a.port, b.port)
    out = run.cli("control", both, "leader", "{}", "--secret-file", run.secret)
    assert out.returncode == 0 and json.loads(out.stdout)["leads"] is True, out
    assert "127.0.0.1:%d leads" % a.port in out.stderr, out.stderr
    run.full_tx(a, rs, "t2", seed=2)
    answer, _ = crash_commit(a, "t2", "after_decision_logged")
    b.wait_ready(TTL_MS / 1000 + 10)
    ok, st, _ = wait_states(rs, serving("t2", answer["version"]), 10)
    assert ok, st
    # A (dead) is skipped; B leads.
    out = run.cli("control", both, "leader", "{}", "--secret-file", run.secret)
    assert out.returncode == 0, out
    assert json.loads(out.stdout)["epoch"] == b.ready["epoch"], out.stdout
    assert "127.0.0.1:%d leads" % b.port in out.stderr, out.stderr
    # Issue 45, 5: an address that is no wtx coordinator of this cluster (here an HTTP server
    # answering 503) is skipped like one that does not lead: B is found behind it.
    http = socket.socket()
    http.bind(("127.0.0.1", 0))
    http.listen(8)

    def answer_http():
        for _ in range(4):
            try:
                conn, _ = http.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            conn.close()

    threading.Thread(target=answer_http, daemon=True).start()
    t0 = time.monotonic()
    out = run.cli("control", "127.0.0.1:%d,127.0.0.1:%d" % (http.getsockname()[1], b.port),
                  "leader", "{}", "--secret-file", run.secret)
    took = time.monotonic() - t0
    http.close()
    assert out.returncode == 0, out
    assert "127.0.0.1:%d leads" % b.port in out.stderr, out.stderr
    assert took < 15, took
    # No address leads: exit 4, naming each.
    spare = free_port()
    out = run.cli("control", "127.0.0.1:%d,127.0.0.1:%d" % (a.port, spare), "leader", "{}",
                  "--secret-file", run.secret)
    assert out.returncode == 4 and "no coordinator leads" in out.stderr, out
    assert str(spare) in out.stderr, out.stderr
    # B ended t2 (every rank acknowledged it); A's audit journal still lists it as pending.
    assert wait_for(lambda: [d for d in log_json(run, url) if d["tx"] == "t2" and d.get("ended")],
                    10), log_json(run, url)
    journal = os.path.join(run.dir, "coordinator-a")
    out = run.cli("status", journal, "--json")
    assert out.returncode == 0, out
    st = json.loads(out.stdout)
    assert "t2" in st["pending"] and "decision log holds the truth" in st["pending_is"], st
    out = run.cli("status", journal, "--decision-log", url, "--json")
    assert out.returncode == 0, out
    st = json.loads(out.stdout)
    assert "t2" not in st["pending"] and "t2" in st["ended_in_log"], st
    assert st["reconciled_with"].startswith("etcd://"), st
