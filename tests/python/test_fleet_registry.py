"""Issue 51, points 2 and 3 (docs/fleet.md): the fleet registry in etcd and the staleness gate.

Replicas here are in-process (two ranks and their coordinator each, tests/python/
test_fleet_lineage.py's Replica), every rank a wtx.fleet.Member of one fleet in a real etcd
(tests/etcd/etcd_cluster.py; without the binary the run exits 77, which CTest reports as
skipped). What a router sees (wtx.fleet.status / serving, `wtx fleet status --json`) and what
each replica's serving gate does (participant.status()["serving"]) are checked together. No
test asserts a duration: every wait polls up to a bound that a loaded machine meets."""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

import wtx
import wtx.fleet
from test_fleet_lineage import Replica, manifests
from test_cli_progress import WTX_BIN

from fleet_harness import WAIT, etcd, replica_of, wait_for  # noqa: F401 (etcd: a fixture)

TTL = 2.0
PERIOD = 0.2


@pytest.fixture
def url(etcd):
    return etcd.url("fleet-" + uuid.uuid4().hex[:8])


class FleetReplica(Replica):
    """A Replica whose ranks are members of `fleet` as replica `name`."""

    def __init__(self, root, url, fleet, name, **opts):
        self.url, self.fleet, self.name = url, fleet, name
        super().__init__(root, **opts)

    def open(self):
        super().open()
        self.members = [wtx.fleet.Member(p, self.url, self.fleet, self.name, world=len(self.ps),
                                         ttl=TTL, period=PERIOD) for p in self.ps]

    def close(self):
        for m in self.members:
            m.close()
        super().close()

    def step(self, step, seed=None, lineage="grpo"):
        self.update(f"{self.name}-s{step}", seed if seed is not None else step, lineage=lineage,
                    step=step)
        for m in self.members:
            m.report_now()

    def serving(self):
        return all(p.status()["serving"] for p in self.ps)

    def held(self):
        return [p.status()["held"] for p in self.ps]


def cli_status(url, fleet):
    out = subprocess.run([WTX_BIN, "fleet", "status", "--decision-log", url, "--fleet", fleet,
                          "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture
def fleet(tmp_path, url):
    made = []

    def make(name, **opts):
        r = FleetReplica(tmp_path / name, url, "rollout", name, **opts)
        made.append(r)
        return r

    yield make
    for r in made:
        try:
            r.close()
        except Exception:
            pass


def test_FleetStatusListsEveryReplicaWithStepLagAndState(url, fleet):
    rs = [fleet(f"r{i}") for i in range(3)]
    for r in rs:
        r.step(1)
    st = wait_for(lambda: (lambda s: s if s["published_step"] == 1 else None)(
        wtx.fleet.status(url, "rollout")), "step 1 published once all three serve it")
    assert st["fleet"] == "rollout" and st["lineage"] == "grpo" and st["newest_step"] == 1
    assert [r["replica"] for r in st["replicas"]] == ["r0", "r1", "r2"]
    for r in st["replicas"]:
        assert r["state"] == "serving" and r["step"] == 1 and r["lag"] == 0
        assert r["reason"] is None and r["ranks"] == 2 and r["world"] == 2
        assert r["version"] == rs[0].ps[0].status()["version"]
    # Two replicas move on: the third lags by one; the default quorum (every live replica)
    # keeps step 1 published.
    rs[0].step(2)
    rs[1].step(2)
    for m in rs[2].members:
        m.report_now()
    st = cli_status(url, "rollout")
    assert st == wtx.fleet.status(url, "rollout")
    assert st["newest_step"] == 2 and st["published_step"] == 1
    assert replica_of(st, "r2")["lag"] == 1 and replica_of(st, "r2")["state"] == "serving"
    # A quorum of two publishes step 2, and the published step never goes back.
    assert wtx.fleet.set_policy(url, "rollout", quorum=2)["quorum"] == 2
    rs[0].members[0].report_now()
    assert wtx.fleet.status(url, "rollout")["published_step"] == 2
    wtx.fleet.set_policy(url, "rollout", quorum=0)
    assert wtx.fleet.status(url, "rollout")["published_step"] == 2
    # The router's question.
    assert [r["replica"] for r in wtx.fleet.serving(url, "rollout")] == ["r0", "r1", "r2"]
    assert [r["replica"] for r in wtx.fleet.serving(url, "rollout", min_step=2)] == ["r0", "r1"]


def test_MaxLagZeroHoldsALaggingReplicaUntilItCatchesUp(url, fleet):
    a, b = fleet("a"), fleet("b")
    a.step(1)
    b.step(1)
    wait_for(lambda: a.serving() and b.serving(), "both serve step 1")
    wtx.fleet.set_policy(url, "rollout", max_lag=0)
    a.step(2)
    for m in b.members:
        m.report_now()
    # b serves step 1 while step 2 exists: strictly on-policy holds it, on every rank.
    assert not b.serving() and a.serving()
    for why in b.held():
        assert "step 1 is 1 behind the newest step 2 (max_lag 0)" in why
    st = wtx.fleet.status(url, "rollout")
    assert replica_of(st, "b")["state"] == "held" and replica_of(st, "b")["lag"] == 1
    assert "max_lag 0" in replica_of(st, "b")["reason"]
    assert [r["replica"] for r in wtx.fleet.serving(url, "rollout")] == ["a"]
    # The published step waits for every live replica: still 1.
    assert st["published_step"] == 1
    # b commits step 2 and is released; now both serve and step 2 is published.
    b.step(2)
    assert b.serving() and b.held() == [None, None]
    a.members[0].report_now()
    st = wtx.fleet.status(url, "rollout")
    assert st["published_step"] == 2
    assert [r["replica"] for r in wtx.fleet.serving(url, "rollout")] == ["a", "b"]


def test_AReaderHoldsAStaleReplicaBeforeItsOwnMemberNotices(url, fleet):
    a, b = fleet("a"), fleet("b")
    a.step(1)
    b.step(1)
    for m in b.members:  # b stops reporting, its record stays until its lease ends
        m.close()
    b.members = []
    wtx.fleet.set_policy(url, "rollout", max_lag=0)
    a.step(2)
    # b's record (if still leased) says serving step 1; the status applies the policy itself.
    st = wtx.fleet.status(url, "rollout")
    rb = replica_of(st, "b")
    if rb is not None:
        assert rb["state"] == "held" and "max_lag 0" in rb["reason"]
    assert [r["replica"] for r in wtx.fleet.serving(url, "rollout")] == ["a"]


# A replica in a process of its own (killed with SIGKILL: no lease revoked), on journals under
# argv[1]: commits argv[4] as step argv[4] (unless argv[4] is 0), joins fleet argv[3] at argv[2]
# as replica "b", prints one JSON line of its rank 0's status after each report, and waits.
REPLICA_PROC = r"""
import json, sys, time
import wtx, wtx.fleet
sys.path.insert(0, sys.argv[5])
from test_fleet_lineage import Replica
root, url, fleet, step = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
import pathlib
r = Replica(pathlib.Path(root))
if step:
    r.update(f"b-s{step}", step, lineage="grpo", step=step)
ms = [wtx.fleet.Member(p, url, fleet, "b", world=2, ttl=%r, period=%r) for p in r.ps]
while True:
    for m in ms:
        try:
            m.report_now()
        except wtx.Error:
            pass
    st = r.ps[0].status()
    print(json.dumps({"serving": st["serving"], "held": st["held"], "step": st["step"]}),
          flush=True)
    time.sleep(0.1)
""" % (TTL, PERIOD)


class ReplicaProcess:
    def __init__(self, root, url, step):
        env = dict(os.environ)
        self.p = subprocess.Popen([sys.executable, "-c", REPLICA_PROC, str(root), url, "rollout",
                                   str(step), os.path.dirname(os.path.abspath(__file__))],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env)

    def status(self):
        line = self.p.stdout.readline()
        assert line, self.p.stderr.read()
        return json.loads(line)

    def kill(self):
        self.p.kill()
        self.p.wait()


def test_ADeadReplicaDisappearsAndARestartedOneJoinsHeldUntilAdmissible(url, fleet, tmp_path):
    a = fleet("a")
    a.step(1)
    b = ReplicaProcess(tmp_path / "b", url, 1)
    try:
        wait_for(lambda: b.status()["serving"], "b serves step 1")
        wtx.fleet.set_policy(url, "rollout", max_lag=0)
        b.kill()  # SIGKILL: nothing revoked, the records stay until the lease ends
        a.step(2)
        wait_for(lambda: replica_of(wtx.fleet.status(url, "rollout"), "b") is None,
                 "b's records gone with its lease")
        st = wtx.fleet.status(url, "rollout")
        assert st["newest_step"] == 2 and [r["replica"] for r in st["replicas"]] == ["a"]
        # b restarts on its journals (step 1): it joins held, and stays held (step 1 is behind
        # step 2 with max_lag 0), never routable.
        b = ReplicaProcess(tmp_path / "b", url, 0)
        first = b.status()
        assert not first["serving"] and first["held"], first
        later = b.status()
        assert later["step"] == 1 and not later["serving"]
        assert "max_lag 0" in later["held"], later
        rb = replica_of(wtx.fleet.status(url, "rollout"), "b")
        assert rb["state"] == "held" and rb["lag"] == 1
        assert [r["replica"] for r in wtx.fleet.serving(url, "rollout")] == ["a"]
    finally:
        b.kill()


def test_ARankMissingFromItsReplicaHoldsTheReplica(url, fleet):
    a = fleet("a")
    a.step(1)
    a.members[1].close()  # rank 1 leaves: the replica is incomplete
    st = wtx.fleet.status(url, "rollout")
    ra = replica_of(st, "a")
    assert ra["state"] == "held" and ra["ranks"] == 1 and ra["world"] == 2
    assert "rank(s) 1 of 2 not registered" in ra["reason"]
    assert wtx.fleet.serving(url, "rollout") == []


def test_AMemberHoldsFromTheStartUntilItHasReadTheRegistry(tmp_path):
    ms = manifests()
    ps = [wtx.Participant.open(str(tmp_path / f"rank{r}"), m, rank=r) for r, m in enumerate(ms)]
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=ps)
    from test_api import hf_sources as sources
    c.begin("t1", lineage="grpo", step=1)
    for p in ps:
        for name, t in sources(ms, 1).items():
            p.write_source(name, t)
    assert c.commit("t1")["outcome"] == "committed"
    assert ps[0].status()["serving"]
    # A registry nobody answers at: held from the start, by name, and it stays held.
    m = wtx.fleet.Member(ps[0], "etcd://127.0.0.1:1/nowhere", "rollout", "r0", ttl=1.0,
                         period=0.1, request_timeout=0.2)
    st = ps[0].status()
    assert not st["serving"] and "joining fleet 'rollout'" in st["held"]
    with pytest.raises(wtx.Error) as e:
        m.report_now()
    assert e.value.code == "E_DECISION_LOG_UNAVAILABLE" and "127.0.0.1:1" in str(e.value)
    assert not ps[0].status()["serving"]
    m.close()
    assert ps[0].status()["serving"] and ps[0].status()["held"] is None
    c.close()
    for p in ps:
        p.close()


def test_AnotherLineageIsHeldByName(url, fleet):
    a, b = fleet("a"), fleet("b")
    a.step(1, lineage="grpo")
    b.step(1, lineage="other")
    st = wtx.fleet.status(url, "rollout")
    assert st["lineage"] == "grpo"
    assert replica_of(st, "b")["state"] == "held"
    assert "lineage 'grpo'" in replica_of(st, "b")["reason"]
    assert not b.serving() and "this replica is of 'other'" in b.held()[0]


@pytest.mark.parametrize("fleet_name", ["", "a/b", "x" * 129, ".."])
def test_BadFleetNamesAreRefusedByName(url, fleet_name):
    with pytest.raises(wtx.Error) as e:
        wtx.fleet.status(url, fleet_name)
    assert e.value.code == "INVALID_ARGUMENT" and "fleet" in str(e.value)
    out = subprocess.run([WTX_BIN, "fleet", "status", "--decision-log", url, "--fleet",
                          fleet_name], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "fleet" in out.stderr


def test_BadPoliciesAreRefusedByName(url):
    for kw, field in [({"max_lag": -1}, "max_lag"), ({"quorum": -2}, "quorum"),
                      ({"max_lag": 1.5}, "max_lag"), ({"lineage": 3}, "lineage")]:
        with pytest.raises(wtx.Error) as e:
            wtx.fleet.set_policy(url, "rollout", **kw)
        assert e.value.code == "INVALID_ARGUMENT" and field in str(e.value)
    out = subprocess.run([WTX_BIN, "fleet", "policy", "--decision-log", url, "--fleet",
                          "rollout", "--max-lag", "-1"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "--max-lag" in out.stderr
    assert wtx.fleet.policy(url, "rollout") == {"max_lag": None, "quorum": 0, "lineage": ""}
    out = subprocess.run([WTX_BIN, "fleet", "policy", "--decision-log", url, "--fleet",
                          "rollout", "--max-lag", "2", "--quorum", "1", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"fleet": "rollout", "max_lag": 2, "quorum": 1,
                                      "lineage": ""}
    assert wtx.fleet.policy(url, "rollout") == {"max_lag": 2, "quorum": 1, "lineage": ""}


def test_AnUnreachableRegistryIsExitFourNamingTheMember():
    out = subprocess.run([WTX_BIN, "fleet", "status", "--decision-log", "etcd://127.0.0.1:1/p",
                          "--fleet", "f", "--decision-log-timeout-ms", "300"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 4 and "127.0.0.1:1" in out.stderr


def test_ACorruptRecordHoldsItsReplicaByKeyAndTheRestStillReads(url, fleet, etcd):
    a = fleet("a")
    a.step(1)
    prefix = url.split("/", 3)[3]
    key = f"{prefix}/fleet/rollout/ranks/zz/0"
    etcd._put(0, key, "not json")
    st = wtx.fleet.status(url, "rollout")
    zz = replica_of(st, "zz")
    assert zz["state"] == "held" and key in zz["reason"]
    assert replica_of(st, "a")["state"] == "serving"
    assert [r["replica"] for r in wtx.fleet.serving(url, "rollout")] == ["a"]


def test_WtxRankDaemonsRegisterAndHoldThroughTheirControlStatus(url, fleet, tmp_path):
    """`wtx rank --fleet`: the CLI daemons are members too (a coordinator and one rank)."""
    from wtx_procs import Run, begin_req, free_port, status_code
    a = fleet("a")
    with Run(tmp_path / "daemons", binary=WTX_BIN) as run:
        port = free_port()
        coord = run.coordinator("c", port, ranks=1)
        rank = run.rank(0, [port], extra=["--fleet", "rollout", "--replica", "cli",
                                          "--replica-ranks", "1", "--fleet-registry", url,
                                          "--fleet-ttl-ms", "1000", "--fleet-period-ms", "100"])
        run.wait_ranks(coord, 1)
        req = begin_req("cli-s1")
        req["req"].update({"lineage": "grpo", "step": 1})
        assert status_code(coord.ok("begin", req)) == "OK"
        rank.ok("step", {"step": {"op": "write", "param": "*", "fill": {"seed": 1}}})
        rank.ok("step", {"step": {"op": "refresh", "derived": "*"}})
        answer = coord.ok("commit", {"tx": "cli-s1"})
        assert answer["decision"] == "commit", answer
        a.step(1)
        st = wait_for(lambda: (lambda s: s if (replica_of(s, "cli") or {}).get("step") == 1
                               else None)(wtx.fleet.status(url, "rollout")),
                      "the daemon registers step 1")
        rc = replica_of(st, "cli")
        assert rc["state"] == "serving" and rc["ranks"] == 1 and rc["world"] == 1
        wtx.fleet.set_policy(url, "rollout", max_lag=0)
        a.step(2)
        rank_status = wait_for(
            lambda: (lambda s: s if s.get("held") else None)(rank.ok("status")),
            "the daemon's rank holds")
        assert rank_status["serving"] is False and "max_lag 0" in rank_status["held"]
        assert replica_of(wtx.fleet.status(url, "rollout"), "cli")["state"] == "held"


def test_VllmInitInfoFleetJoinsEveryRankAndBadFieldsAreNamed(url, fleet, tmp_path):
    """vLLM's init_info["fleet"]: the engine's rank joins the fleet and, serving only what vLLM
    loaded itself while the fleet's newest step is 1 with max_lag 0, holds (vLLM's gate refuses
    to generate, naming why); it leaves at shutdown. A bad field is refused by name and
    nothing stays open."""
    import datetime
    import torch
    import torch.distributed as dist
    import wtx.vllm
    from conftest import free_port
    from vllm_doubles import LoaderLlama, install_fake_vllm, vllm_config, weight_transfer_config
    a = fleet("a")
    a.step(1)
    wtx.fleet.set_policy(url, "rollout", max_lag=0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1, timeout=datetime.timedelta(seconds=30))
    try:
        install_fake_vllm()
        eng = wtx.vllm.WtxWeightTransferEngine(weight_transfer_config(), vllm_config(1, 0),
                                               torch.device("cpu"), LoaderLlama(1, 0, None))
        d = str(tmp_path)
        base = {"journal_dir": d + "/r", "coordinator_journal": d + "/c", "inner": "bcast",
                "inner_init_info": {"src": 0}}
        for fleet_cfg, field in [({"registry": url, "name": "rollout"}, "fleet.replica"),
                                 ({"registry": url, "name": "rollout", "replica": "v",
                                   "ttl": -1}, "fleet.ttl"),
                                 ({"registry": url, "name": "a/b", "replica": "v"}, "fleet"),
                                 ({"registry": url, "name": "rollout", "replica": "v",
                                   "colour": 1}, "fleet.colour"),
                                 ("rollout", "init_info.fleet")]:
            with pytest.raises(wtx.Error) as e:
                eng.init_transfer_engine(dict(base, fleet=fleet_cfg))
            assert field in e.value.message, e.value.message
            assert eng.participant is None
        eng.init_transfer_engine(dict(base, fleet={"registry": url, "name": "rollout",
                                                   "replica": "vllm-0", "ttl": TTL,
                                                   "period": PERIOD}))
        rv = wait_for(lambda: replica_of(wtx.fleet.status(url, "rollout"), "vllm-0"),
                      "the vLLM rank registers")
        assert rv["state"] == "held" and rv["ranks"] == 1 and rv["world"] == 1
        assert "not loaded" in rv["reason"] or "no version" in rv["reason"], rv
        state = wait_for(lambda: (lambda s: s if "no step committed here" in (s["reason"] or "")
                                  else None)(eng.serving_state()), "the fleet holds the rank")
        assert state["serving"] is False and "max_lag 0" in state["reason"]
        eng.shutdown()
        assert replica_of(wtx.fleet.status(url, "rollout"), "vllm-0") is None  # lease revoked
    finally:
        dist.destroy_process_group()


def _sglang_state(scheduler, tp_rank):
    st = scheduler.wtx.participant.status()
    return {"paused": scheduler._engine_paused, "serving": st["serving"], "held": st["held"],
            "step": st["step"]}


def _sglang_fleet_lag(t, args):
    from test_sglang import _load_tokenizer_plugins, hf_weights
    import pathlib
    _load_tokenizer_plugins(args)
    state = _sglang_state
    out = {"one": t.step(hf_weights(1), "1"), "after_one": t.inspect(state)}
    # Another replica of the fleet commits step 2: with max_lag 0 SGLang's ranks must pause.
    other = FleetReplica(pathlib.Path(args["dir"]) / "other", args["fleet"]["registry"],
                         "rollout", "other")
    try:
        other.step(2)
        deadline = time.monotonic() + WAIT
        while True:
            held = t.inspect(state)
            if all(s["paused"] and s["held"] for s in held) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out["held"] = held
        out["registry_while_held"] = wtx.fleet.status(args["fleet"]["registry"], "rollout")
        out["two"] = t.step(hf_weights(2), "2")
        out["after_two"] = t.inspect(state)
    finally:
        other.close()
    return out


def test_SglangStaysPausedWhileTheFleetHoldsItAndResumesAtAnAdmissibleStep(url, tmp_path):
    """SGLang through its own dispatcher (the plugin, $WTX_SGLANG_FLEET_REGISTRY): with
    max_lag 0, another replica's step 2 pauses generation on every rank (the event loop runs
    no batch), by name; SGLang's step 2 commits at continue_generation and resumes it."""
    from test_sglang import _plugin_args, world
    wtx.fleet.set_policy(url, "rollout", max_lag=0)
    f = world(_sglang_fleet_lag, _plugin_args(tmp_path, lineage="grpo", fleet={
        "registry": url, "name": "rollout", "replica": "sgl"}))[0]
    assert all(ok for (ok, _), _ in f["one"]), f["one"]
    for s in f["after_one"]:
        assert s["step"] == 1 and s["serving"] and not s["paused"], s
    for s in f["held"]:
        assert s["paused"] and not s["serving"], s
        assert "step 1 is 1 behind the newest step 2 (max_lag 0)" in s["held"], s
    sgl = replica_of(f["registry_while_held"], "sgl")
    assert sgl["state"] == "held" and sgl["lag"] == 1 and sgl["world"] == 2, sgl
    assert all(ok for (ok, _), _ in f["two"]), f["two"]
    for s in f["after_two"]:
        assert s["step"] == 2 and s["serving"] and not s["paused"] and s["held"] is None, s
