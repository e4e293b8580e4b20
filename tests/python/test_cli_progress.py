"""Progress on long commands (issue 52): `wtx load`, `wtx verify`, `wtx check` and `wtx plan`
draw done/total, rate and time left on a terminal, and print nothing extra when stdout is not a
terminal or with --json. The terminal is a real pseudo-terminal (pty): the CLI decides by
isatty, as it does for a person. $WTX_BIN names the build tree's wtx."""

import json
import os
import pty
import select
import struct
import subprocess

import numpy as np
import torch

import wtx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WTX_BIN = os.environ.get("WTX_BIN", os.path.join(REPO, "build", "bin", "wtx"))
CONFIG = os.path.join(REPO, "tests", "conformance", "models", "tiny-llama", "config.json")


def write_checkpoint(path, manifest):
    """A safetensors file holding every source of `manifest` (bf16, seeded)."""
    g = torch.Generator().manual_seed(3)
    header, blobs, offset = {}, [], 0
    for p in manifest.params:
        for s in p["shards"]:
            if s["source"] in header:
                continue
            t = torch.randn(s["source_shape"], generator=g).to(torch.bfloat16)
            raw = t.view(torch.int16).numpy().tobytes()
            header[s["source"]] = {"dtype": "BF16", "shape": list(s["source_shape"]),
                                   "data_offsets": [offset, offset + len(raw)]}
            blobs.append(raw)
            offset += len(raw)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def run_on_terminal(args, timeout=120):
    """Runs `args` with stdout and stderr on a pseudo-terminal: (exit code, what it drew)."""
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm")
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], timeout)
        if not r:
            proc.kill()
            raise AssertionError("no output within %d s: %r" % (timeout, out))
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    # The terminal turns each "\n" into "\r\n": back to "\n", so that a bare "\r" is one the
    # program drew.
    return proc.wait(timeout=timeout), out.decode(errors="replace").replace("\r\n", "\n")


def test_LoadShowsProgressOnATerminalAndNothingElsewhere(tmp_path):
    m = wtx.Manifest.from_hf_config(CONFIG, tp=1, rank=0, dtype="bf16")
    ckpt = str(tmp_path / "model.safetensors")
    write_checkpoint(ckpt, m)
    args = [WTX_BIN, "load", "--checkpoint", ckpt, "--hf-config", CONFIG, "--tp", "1"]
    rc, drawn = run_on_terminal(args)
    assert rc == 0, drawn
    # The progress line: the bytes read of the checkpoint, all of them at the end, then erased
    # (carriage returns) before the result.
    total = os.path.getsize(ckpt) - 8 - struct.unpack("<Q", open(ckpt, "rb").read(8))[0]
    assert "\rload  " in drawn, drawn
    assert "100%" in drawn, drawn
    assert "KiB / " in drawn or "B / " in drawn, drawn
    result = drawn.rsplit("\r", 1)[-1].strip()
    assert result.startswith("load of ") and "committed" in result, drawn
    assert total > 0

    # Piped: exactly the result, nothing drawn, nothing on stderr.
    piped = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stdout and "%" not in piped.stdout
    assert piped.stderr == ""

    # --json on a terminal: one JSON document, nothing drawn.
    rc, drawn = run_on_terminal(args + ["--json", "--journal-dir", str(tmp_path / "j")])
    assert rc == 0, drawn
    assert "\r" not in drawn
    assert json.loads(drawn)["outcome"] == "committed"


def test_LoadOverTcpShowsEachRanksBytesAsItsLoadReturns(tmp_path):
    # Over --transport tcp the rank processes read the checkpoint: the line counts each rank's
    # share when its load step returns, reaching every byte of both ranks' shares.
    m = wtx.Manifest.from_hf_config(CONFIG, tp=1, rank=0, dtype="bf16")
    ckpt = str(tmp_path / "model.safetensors")
    write_checkpoint(ckpt, m)
    args = [WTX_BIN, "load", "--checkpoint", ckpt, "--hf-config", CONFIG, "--tp", "2",
            "--transport", "tcp"]
    rc, drawn = run_on_terminal(args)
    assert rc == 0, drawn
    assert "\rload  " in drawn, drawn
    assert "100%" in drawn, drawn
    result = drawn.rsplit("\r", 1)[-1].strip()
    assert result.startswith("load of ") and "committed" in result, drawn
    piped = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stdout and "%" not in piped.stdout


def test_VerifyAndCheckShowProgressOnATerminalAndNothingElsewhere(tmp_path):
    m = wtx.Manifest.from_hf_config(CONFIG, tp=1, rank=0, dtype="bf16")
    tensors = {p["name"]: torch.zeros(p["shape"], dtype=torch.bfloat16) for p in m.params}
    rank_dir = str(tmp_path / "rank0")
    p = wtx.Participant.open(rank_dir, m, rank=0, tensors=tensors)
    c = wtx.Coordinator.open(str(tmp_path / "coord"), participants=[p])
    g = torch.Generator().manual_seed(5)
    c.begin("t1")
    for prm in m.params:
        for s in prm["shards"]:
            p.write_source(s["source"], torch.randn(s["source_shape"], generator=g).to(
                torch.bfloat16))
    assert c.commit("t1")["outcome"] == "committed"
    image = str(tmp_path / "live.img")
    with open(image, "wb") as f:
        for prm in m.params:
            f.write(tensors[prm["name"]].view(torch.int16).numpy().tobytes())
    manifest = str(tmp_path / "m.json")
    with open(manifest, "w") as f:
        f.write(m.to_json())
    p.close()
    c.close()
    args = [WTX_BIN, "verify", rank_dir, "--image", image, "--manifest", manifest]
    rc, drawn = run_on_terminal(args)
    assert rc == 0, drawn
    assert "\rverify: reading the image  " in drawn and "100%" in drawn, drawn
    piped = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "\r" not in piped.stdout and piped.stderr == "", piped
    rc, drawn = run_on_terminal(args + ["--json"])
    assert rc == 0 and json.loads(drawn)["match"] is True, drawn

    # `wtx check`: the records replayed, all of them at the end; nothing when piped.
    rc, drawn = run_on_terminal([WTX_BIN, "check", rank_dir])
    assert rc == 0, drawn
    assert "\rcheck: records replayed  " in drawn and "100%" in drawn, drawn
    assert drawn.rsplit("\r", 1)[-1].strip().startswith("ok: "), drawn
    piped = subprocess.run([WTX_BIN, "check", rank_dir], capture_output=True, text=True,
                           timeout=120)
    assert piped.returncode == 0 and "\r" not in piped.stdout and piped.stderr == "", piped


def test_PlanShowsProgressOnATerminalAndNothingElsewhere():
    args = [WTX_BIN, "plan", "--hf-config", CONFIG, "--tp", "2", "--trainer", "fsdp:2"]
    rc, drawn = run_on_terminal(args)
    assert rc == 0, drawn
    assert "\rplan: engine ranks planned  2 / 2  100%" in drawn, drawn
    assert drawn.rsplit("\r", 1)[-1].strip(), drawn  # the summary follows, the line erased
    piped = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "\r" not in piped.stdout and piped.stderr == "", piped
    rc, drawn = run_on_terminal(args + ["--json"])
    assert rc == 0 and "\r" not in drawn and json.loads(drawn)["pieces"] is not None, drawn
