"""Issue 51, point 4 (docs/fleet.md, "Catch-up"): a lagging replica catches up from a healthy
peer without the trainer (`wtx fleet catch-up`), with the CLI daemons: two replicas, each a
`wtx coordinator` and two `wtx rank` processes registered in one fleet in a real etcd
(tests/etcd/etcd_cluster.py; without the binary the run exits 77, which CTest reports as
skipped). Each rank copies its peer rank's live bytes and the commit must reproduce the peer's
version; a peer that is updating, a peer that is gone and bytes that do not hash to the peer's
version abort the catch-up by name and leave the replica held. No test asserts a duration."""

import json
import os
import uuid

import pytest

import wtx
import wtx.fleet
from test_cli_progress import WTX_BIN

from fleet_harness import etcd, replica_of, wait_for  # noqa: F401 (etcd: a fixture)
from wtx_procs import Run, begin_req, free_port, status_code  # noqa: E402

RANKS = 2


class CliReplica:
    """A `wtx coordinator` and RANKS `wtx rank` daemons, every rank in fleet `rollout`."""

    def __init__(self, run, name, url):
        self.run, self.name, self.url = run, name, url
        self.port = free_port()
        self.coord = run.coordinator(name, self.port, ranks=RANKS)
        self.ranks = [self.start_rank(r) for r in range(RANKS)]
        run.wait_ranks(self.coord, RANKS)

    def start_rank(self, r):
        return self.run.rank(r, [self.port], journal=os.path.join(self.run.dir,
                                                                  f"{self.name}-rank-{r}"),
                             extra=["--fleet", "rollout", "--replica", self.name,
                                    "--replica-ranks", str(RANKS), "--fleet-registry", self.url,
                                    "--fleet-ttl-ms", "1000", "--fleet-period-ms", "100"])

    def step(self, step, seed):
        tx = f"{self.name}-s{step}"
        req = begin_req(tx)
        req["req"].update({"lineage": "grpo", "step": step})
        assert status_code(self.coord.ok("begin", req)) == "OK"
        for r in self.ranks:
            r.ok("step", {"step": {"op": "write", "param": "*", "fill": {"seed": seed}}})
            r.ok("step", {"step": {"op": "refresh", "derived": "*"}})
        answer = self.coord.ok("commit", {"tx": tx})
        assert answer["decision"] == "commit", answer
        return answer["version"]

    def statuses(self):
        return [r.ok("status") for r in self.ranks]

    def catch_up(self, *extra):
        return self.run.cli("fleet", "catch-up", "--decision-log", self.url, "--fleet", "rollout",
                            "--replica", self.name, "--coordinator", f"127.0.0.1:{self.port}",
                            "--secret-file", self.run.secret, "--json", *extra, timeout=120)


@pytest.fixture
def fleet_of_two(etcd, tmp_path):
    url = etcd.url("catch-" + uuid.uuid4().hex[:8])
    with Run(tmp_path / "daemons", binary=WTX_BIN) as run:
        a, b = CliReplica(run, "a", url), CliReplica(run, "b", url)
        a.step(1, 1)
        b.step(1, 1)
        wtx.fleet.set_policy(url, "rollout", max_lag=0)
        v2 = a.step(2, 2)
        wait_for(lambda: all(s.get("held") for s in b.statuses()), "b holds: step 1 < step 2")
        yield url, run, a, b, v2


def test_ALaggingReplicaCatchesUpFromItsPeerAndServesThePeersVersion(fleet_of_two):
    url, run, a, b, v2 = fleet_of_two
    assert replica_of(wtx.fleet.status(url, "rollout"), "b")["state"] == "held"
    out = b.catch_up()
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["replica"] == "b" and report["from"] == "a" and report["step"] == 2
    assert report["version"] == v2 and report["bytes"] > 0 and not report["already"]
    assert report["tx"] == "catch-up.a.2"
    for s in b.statuses():
        assert s["version"] == v2 and s["step"] == 2 and s["lineage"] == "grpo", s
    rb = wait_for(lambda: (lambda r: r if r and r["state"] == "serving" else None)(
        replica_of(wtx.fleet.status(url, "rollout"), "b")), "b serves again")
    assert rb["version"] == v2 and rb["lag"] == 0
    for s in b.statuses():
        assert s["serving"] and s["held"] is None, s
    # Nothing left to do the second time.
    again = b.catch_up()
    assert again.returncode == 0 and json.loads(again.stdout)["already"], again.stdout


def test_BytesThatDoNotHashToThePeersVersionAbortTheCatchUp(fleet_of_two):
    url, run, a, b, v2 = fleet_of_two
    # A stray write on the peer (wtx is not told): it still says it serves v2, but its bytes
    # are no longer v2's. The copy cannot commit as v2.
    a.ranks[1].ok("step", {"step": {"op": "poke", "param": "*", "fill": {"seed": 99}}})
    out = b.catch_up()
    assert out.returncode == 1, out.stdout
    assert "E_VERSION_MISMATCH" in out.stderr and "aborted" in out.stderr, out.stderr
    for s in b.statuses():
        assert not s["serving"] and s["step"] == 1 and s["active_tx"] is None, s
    # Its members report the abort at their next period (catching_up until then).
    wait_for(lambda: replica_of(wtx.fleet.status(url, "rollout"), "b")["state"] == "held",
             "b held in the registry after the aborted catch-up")


def test_APeerThatIsUpdatingIsNotCopiedFrom(fleet_of_two):
    url, run, a, b, v2 = fleet_of_two
    req = begin_req("a-s3")
    req["req"].update({"lineage": "grpo", "step": 3})
    assert status_code(a.coord.ok("begin", req)) == "OK"
    out = b.catch_up("--from", "a")
    assert out.returncode != 0
    assert "rank" in out.stderr and ("a-s3" in out.stderr or "updating" in out.stderr), out.stderr
    for s in b.statuses():
        assert not s["serving"] and s["step"] == 1 and s["active_tx"] is None, s


def test_APeerThatIsGoneAbortsTheCatchUpByName(fleet_of_two):
    url, run, a, b, v2 = fleet_of_two
    # The peer's rank 1 dies after the registry still lists it: its control port is gone.
    a.ranks[1].kill()
    out = b.catch_up("--from", "a")
    assert out.returncode != 0
    assert "rank 1 of replica 'b'" in out.stderr or "peer" in out.stderr, out.stderr
    for s in b.statuses():
        assert not s["serving"] and s["step"] == 1 and s["active_tx"] is None, s


def test_CatchUpRefusesWhatItCannotDoByName(fleet_of_two):
    url, run, a, b, v2 = fleet_of_two
    out = b.catch_up("--from", "nobody")
    assert out.returncode == 2 and "peer replica 'nobody' is not registered" in out.stderr
    out = b.catch_up("--from", "b")
    assert out.returncode == 2 and "cannot be copied" in out.stderr, out.stderr
    out = run.cli("fleet", "catch-up", "--decision-log", url, "--fleet", "rollout", "--replica",
                  "ghost", "--coordinator", f"127.0.0.1:{b.port}", "--secret-file", run.secret)
    assert out.returncode == 2 and "replica 'ghost' is not registered" in out.stderr


def test_ShowAtAnswersWhichVersionAReplicaServedWhen(fleet_of_two):
    url, run, a, b, v2 = fleet_of_two
    import time as _time
    journal = os.path.join(run.dir, "a-rank-0")
    before_two = _time.time()  # a serves step 2 since the fixture; b step 1
    a.step(3, 3)
    # a's journal is held open by its daemon: the reader reads it alongside (wtx show/log do).
    out = run.cli("show", journal, "--at", "%.6f" % before_two, "--json")
    assert out.returncode == 0, out.stderr
    then = json.loads(out.stdout)
    assert then["serving"] and then["version"] == v2 and then["step"] == 2, then
    assert then["committed_tx"] == "a-s2" and then["until"] is not None
    now = json.loads(run.cli("show", journal, "--at", "%.6f" % (_time.time() + 1), "--json").stdout)
    assert now["serving"] and now["step"] == 3 and now["until"] is None, now
    early = json.loads(run.cli("show", journal, "--at", "1", "--json").stdout)
    assert not early["serving"] and early["reason"] == "no version committed yet", early
    for bad in ["yesterday", "2026-13-01T00:00:00Z", "-5"]:
        out = run.cli("show", journal, "--at", bad)
        assert out.returncode == 2 and "--at" in out.stderr, (bad, out.stderr)
    out = run.cli("show", journal, "a-s2", "--at", "1")
    assert out.returncode == 2 and "--at takes a rank's journal DIR alone" in out.stderr
