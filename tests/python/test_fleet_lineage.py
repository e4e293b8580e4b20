"""Issue 51, lineage (docs/fleet.md): every committed version is a step of a named lineage, a
replica never commits a step at or below the one it committed (across restarts and a lost
coordinator journal), and a journal belongs to one lineage of one model. Through the Python
module and the CLI; $WTX_BIN names the build tree's wtx."""

import json
import os
import subprocess

import pytest

import wtx
from test_api import hf_sources as sources
from test_cli_progress import CONFIG, WTX_BIN, write_checkpoint

TINY_QWEN2 = os.path.join(os.path.dirname(CONFIG), "..", "tiny-qwen2", "config.json")


def manifests(tp=2, dtype="bf16"):
    return [wtx.Manifest.from_hf_config(CONFIG, tp=tp, rank=r, dtype=dtype) for r in range(tp)]


class Replica:
    """Two ranks and their coordinator, each journal under `root` (reopened by open())."""

    def __init__(self, root, ms=None, coord="coord", **opts):
        self.root, self.ms, self.coord_dir, self.opts = root, ms or manifests(), coord, opts
        self.open()

    def open(self):
        self.ps = [wtx.Participant.open(str(self.root / f"rank{r}"), m, rank=r, **self.opts)
                   for r, m in enumerate(self.ms)]
        self.c = wtx.Coordinator.open(str(self.root / self.coord_dir), participants=self.ps)

    def close(self):
        self.c.close()
        for p in self.ps:
            p.close()

    def update(self, tx, seed, **begin):
        began = self.c.begin(tx, **begin)
        src = sources(self.ms, seed)
        for p in self.ps:
            for name, t in src.items():
                p.write_source(name, t)
        out = self.c.commit(tx)
        assert out["outcome"] == "committed", out
        return began, out


def test_CommitCarriesLineageAndStepEverywhere(tmp_path):
    r = Replica(tmp_path)
    began, out = r.update("t1", 1, lineage="policy-a", step=5)
    assert began == {"tx": "t1", "lineage": "policy-a", "step": 5}
    assert out["step"] == 5 and out["lineage"] == "policy-a"
    for p in r.ps:
        st = p.status()
        assert st["lineage"] == "policy-a" and st["step"] == 5 and st["serving"]
    d = [e for e in r.c.decisions() if e["tx"] == "t1"][0]
    assert d["step"] == 5 and d["lineage"] == "policy-a"
    r.close()


def test_CommittedStepIsAMetricLabelledWithTheLineage(tmp_path):
    from test_metrics import scrape, value
    r = Replica(tmp_path, metric_labels={"replica": "lin-metrics"})
    r.update("t1", 1, lineage="policy-m", step=4)
    assert value(scrape(), "wtx_committed_step", replica="lin-metrics", rank="1",
                 lineage="policy-m") == 4
    r.update("t2", 2)
    assert value(scrape(), "wtx_committed_step", replica="lin-metrics", rank="0") == 5
    r.close()
    assert not [k for k in scrape() if k[0] == "wtx_committed_step"
                and ("replica", "lin-metrics") in k[1]]


def test_StepAtOrBelowCommittedIsRefusedAndChangesNothing(tmp_path):
    r = Replica(tmp_path)
    r.update("t1", 1, lineage="policy-a", step=5)
    before = [p.status() for p in r.ps]
    for step in (5, 3, 0):
        with pytest.raises(wtx.Error) as e:
            r.c.begin(f"back{step}", step=step)
        assert e.value.code == "E_STEP_REGRESSION"
        assert f"step {step}" in e.value.message and "step 5" in e.value.message
    assert [p.status() for p in r.ps] == before  # nothing began, nothing changed
    _, out = r.update("t2", 2, step=6)
    assert out["step"] == 6
    r.close()


def test_StepWithoutANumberIsOnePastTheHighest(tmp_path):
    r = Replica(tmp_path)
    _, first = r.update("t1", 1, lineage="policy-a")
    assert first["step"] == 0  # a lineage's first step, when none is named
    _, out = r.update("t2", 2, step=10)
    _, out = r.update("t3", 3)
    assert out["step"] == 11
    r.close()


def test_StepNeverGoesBackAcrossRestartsAndALostCoordinatorJournal(tmp_path):
    r = Replica(tmp_path)
    r.update("t1", 1, lineage="policy-a", step=7)
    r.close()
    # Restarted ranks keep their step; a coordinator with a fresh journal learns it from them.
    r = Replica(tmp_path, coord="coord-new")
    assert [p.status()["step"] for p in r.ps] == [7, 7]
    with pytest.raises(wtx.Error) as e:
        r.c.begin("t2", step=7)
    assert e.value.code == "E_STEP_REGRESSION" and "rank" in e.value.message
    _, out = r.update("t3", 2)
    assert out["step"] == 8 and out["lineage"] == "policy-a"
    r.close()


def test_DecisionLogRemembersTheStepFreshRanksForgot(tmp_path):
    r = Replica(tmp_path)
    r.update("t1", 1, lineage="policy-a", step=4)
    r.close()
    # The same coordinator journal (the decision log) with ranks whose journals are new.
    fresh = Replica(tmp_path / "x", coord=str(tmp_path / "coord"))
    with pytest.raises(wtx.Error) as e:
        fresh.c.begin("t2", lineage="policy-a", step=2)
    assert e.value.code == "E_STEP_REGRESSION" and "decision log" in e.value.message
    assert "'t1'" in e.value.message
    _, out = fresh.update("t3", 2, lineage="policy-a")
    assert out["step"] == 5
    fresh.close()


def test_JournalOfAnotherModelIsRefusedNamingBoth(tmp_path):
    r = Replica(tmp_path)
    r.update("t1", 1, lineage="policy-a", step=3)
    r.close()
    other = manifests(dtype="f32")
    assert other[0].fingerprint != r.ms[0].fingerprint
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "rank0"), other[0], rank=0)
    assert e.value.code == "E_MANIFEST_MISMATCH"
    msg = e.value.message
    assert r.ms[0].fingerprint in msg and other[0].fingerprint in msg and "policy-a" in msg
    # Nothing changed: the journal opens with its own model, step intact.
    r = Replica(tmp_path)
    assert r.ps[0].status()["step"] == 3
    r.close()


def test_AnotherLineageIsRefusedUnlessStartedExplicitly(tmp_path):
    r = Replica(tmp_path)
    r.update("t1", 1, lineage="policy-a", step=3)
    with pytest.raises(wtx.Error) as e:
        r.c.begin("t2", lineage="policy-b")
    assert e.value.code == "E_LINEAGE_MISMATCH"
    assert "policy-a" in e.value.message and "policy-b" in e.value.message
    r.close()
    with pytest.raises(wtx.Error) as e:
        wtx.Participant.open(str(tmp_path / "rank0"), r.ms[0], rank=0, lineage="policy-b")
    assert e.value.code == "E_LINEAGE_MISMATCH"
    # Started explicitly: the old version and step are forgotten; a full update serves again.
    r = Replica(tmp_path, ms=manifests(dtype="f32"), lineage="policy-b", new_lineage=True)
    for p in r.ps:
        st = p.status()
        assert st["lineage"] == "policy-b" and st["step"] is None
        assert st["version"] is None and not st["serving"]
    r.c.begin("t3", step=0)
    src = {k: v.float() for k, v in sources(r.ms, 3).items()}
    for p in r.ps:
        for name, t in src.items():
            p.write_source(name, t)
    out = r.c.commit("t3")
    assert out["outcome"] == "committed" and out["step"] == 0
    assert all(p.status()["serving"] for p in r.ps)
    r.close()


def wtx_cli(*args):
    return subprocess.run([WTX_BIN, *args], capture_output=True, text=True, timeout=300)


def test_CliLoadStatusAndLogShowTheStep(tmp_path):
    m = wtx.Manifest.from_hf_config(CONFIG, tp=1, rank=0, dtype="bf16")
    ckpt = str(tmp_path / "model.safetensors")
    write_checkpoint(ckpt, m)
    jd = tmp_path / "j"
    p = wtx_cli("load", "--checkpoint", ckpt, "--hf-config", CONFIG, "--tp", "1",
                "--journal-dir", str(jd), "--lineage", "policy-a", "--step", "12", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["outcome"] == "committed" and out["step"] == 12 and out["lineage"] == "policy-a"
    assert out["ranks"][0]["step"] == 12
    st = json.loads(wtx_cli("status", str(jd / "rank-0"), "--json").stdout)
    assert st["step"] == 12 and st["lineage"] == "policy-a" and st["model"] == m.fingerprint
    log = json.loads(wtx_cli("log", str(jd / "rank-0"), "--json").stdout)
    assert log[-1]["step"] == 12 and log[-1]["lineage"] == "policy-a"
    clog = json.loads(wtx_cli("log", str(jd / "coordinator"), "--json").stdout)
    assert clog[-1]["step"] == 12
    table = wtx_cli("log", str(jd / "rank-0")).stdout.splitlines()
    assert "STEP" in table[0].split() and "12" in table[-1].split()
    bad = wtx_cli("load", "--checkpoint", ckpt, "--hf-config", CONFIG, "--tp", "1",
                  "--step", "-1")
    assert bad.returncode == 2 and "--step" in bad.stderr and "-1" in bad.stderr


def test_CliRankRefusesAJournalOfAnotherModel(tmp_path):
    m = wtx.Manifest.from_hf_config(CONFIG, tp=1, rank=0, dtype="bf16")
    ckpt = str(tmp_path / "model.safetensors")
    write_checkpoint(ckpt, m)
    jd = tmp_path / "j"
    assert wtx_cli("load", "--checkpoint", ckpt, "--hf-config", CONFIG, "--tp", "1",
                   "--journal-dir", str(jd)).returncode == 0
    secret = tmp_path / "secret"
    secret.write_text("s" * 32)
    secret.chmod(0o600)
    p = wtx_cli("rank", "--connect", "127.0.0.1:1", "--rank", "0", "--journal",
                str(jd / "rank-0"), "--secret-file", str(secret), "--hf-config", TINY_QWEN2,
                "--tp", "1")
    assert p.returncode != 0
    assert "E_MANIFEST_MISMATCH" in p.stderr and m.fingerprint in p.stderr
    assert "--new-lineage" in p.stderr
