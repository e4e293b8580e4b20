#!/usr/bin/env bash
# `pip install --no-build-isolation .` of this clone into a fresh virtual environment (with the
# system site packages, for Debian's torch), offline, then `import wtx` from another directory
# with no PYTHONPATH. Usage: check_pip_install.sh SRC BUILD_DIR VENV PYTHON
# BUILD_DIR: an existing CMake build of SRC for PYTHON (setup.py reuses it: $WTX_CMAKE_BUILD_DIR).
set -euo pipefail
src=$1 build=$2 venv=$3 py=$4
rm -rf "$venv"
"$py" -m venv --system-site-packages "$venv"
WTX_CMAKE_BUILD_DIR="$build" "$venv/bin/python" -m pip install --no-build-isolation --no-deps \
  --no-index --quiet "$src"
elsewhere=$(mktemp -d)
trap 'rm -rf "$elsewhere"' EXIT
cd "$elsewhere"
env -u PYTHONPATH "$venv/bin/python" - "$venv" <<'PY'
import os, sys
import wtx, wtx.sglang, wtx.torch_dist, wtx.vllm
venv = os.path.realpath(sys.argv[1])
where = os.path.realpath(wtx.__file__)
assert where.startswith(venv), f"wtx imported from {where}, not from the venv {venv}"
pkg = os.path.dirname(where)
for f in ("py.typed", "_wtx.pyi"):
    assert os.path.exists(os.path.join(pkg, f)), f"{f} missing from the installed package"
m = wtx.Manifest.from_json('{"params": [{"name": "w", "dtype": "f32", "shape": [4]}]}')
# The installed module has no fault injection (cmake/wtx_python.cmake): test_crash_at is
# refused by name, and nothing is opened.
import tempfile
d = tempfile.mkdtemp()
try:
    wtx.Participant.open(os.path.join(d, "j"), m, rank=0, test_crash_at="after_prepare_logged")
    raise AssertionError("the installed module accepted test_crash_at")
except wtx.Error as e:
    assert "test_crash_at" in e.message, e.message
assert not os.path.exists(os.path.join(d, "j")), "a journal was opened"
os.rmdir(d)
print("wtx", where, m)
PY
