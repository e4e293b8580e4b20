"""Issue 51, point 6: examples/fleet/run.sh (named in the README) runs as documented: a local
etcd, three replicas of CLI daemons, five steps, one replica killed after step 2 and restarted
after step 5 (held, three steps behind), then caught up from a peer. Its last line is the final
`wtx fleet status --json`. Needs etcd (exit 77, skipped, without it: fleet_harness)."""

import json
import os
import subprocess

import fleet_harness  # noqa: F401  (exits 77 without etcd)
from test_cli_progress import WTX_BIN

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "fleet",
                      "run.sh")


def line_after(lines, prefix):
    found = [ln[len(prefix):] for ln in lines if ln.startswith(prefix)]
    assert len(found) == 1, lines
    return json.loads(found[0])


def by_replica(status):
    return {r["replica"]: r for r in status["replicas"]}


def test_TheFleetExampleRestartsAReplicaHeldAndCatchesItUpFromAPeer():
    out = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, WTX_BIN=WTX_BIN))
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    after_two = by_replica(line_after(lines, "after step 2: "))
    assert sorted(after_two) == ["r0", "r1", "r2"]
    assert all(r["state"] == "serving" and r["step"] == 2 for r in after_two.values())
    before = line_after(lines, "r2 restarted, before catch-up: ")
    assert before["newest_step"] == 5
    r2 = by_replica(before)["r2"]
    assert r2["state"] == "held" and r2["step"] == 2 and r2["lag"] == 3, r2
    # Its process died: its bytes with it (the rank's own memory), so it is dirty as well as
    # three steps behind; either holds it.
    assert r2["reason"], r2
    final = json.loads(lines[-1])
    assert final["newest_step"] == 5 and final["published_step"] == 5
    replicas = by_replica(final)
    assert sorted(replicas) == ["r0", "r1", "r2"]
    versions = {r["version"] for r in replicas.values()}
    assert len(versions) == 1, replicas
    for r in replicas.values():
        assert r["state"] == "serving" and r["step"] == 5 and r["lag"] == 0, r
    assert "replica r2 caught up from r0: step 5" in out.stderr
