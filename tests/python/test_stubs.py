"""The type stubs of the extension (python/wtx/_wtx.pyi) declare exactly what the module has:
every public class, method, property and function, and nothing it lacks; and every public
class and method of the package has a docstring (help() shows it)."""

import ast
import inspect
import os

import wtx
import wtx._wtx as ext
import wtx.sglang
import wtx.torch_dist
import wtx.vllm

STUB = os.path.join(os.path.dirname(wtx.__file__), "_wtx.pyi")
if not os.path.exists(STUB):  # the source tree's copy (a build tree without the stubs)
    STUB = os.path.join(os.path.dirname(__file__), "..", "..", "python", "wtx", "_wtx.pyi")
KEEP_DUNDER = {"__enter__", "__exit__"}


def _stub_names():
    tree = ast.parse(open(STUB).read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)
                              and (not n.name.startswith("__") or n.name in KEEP_DUNDER)}
            out[node.name] |= {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
        elif isinstance(node, ast.FunctionDef):
            out[node.name] = None
    return out


def _runtime_names():
    out = {}
    for name, obj in vars(ext).items():
        if name.startswith("_"):
            continue
        if inspect.isclass(obj):
            members = {k for k in dir(obj) if not k.startswith("__") or k in KEEP_DUNDER}
            if issubclass(obj, Exception):
                members = {k for k in vars(obj) if not k.startswith("__")}
                members |= {"code", "message", "details"} if obj is ext.Error else {
                    "tx", "decision", "votes", "missing"}
            out[name] = members
        elif callable(obj):
            out[name] = None
    return out


def test_StubsDeclareExactlyTheExtensionsNames():
    stub, runtime = _stub_names(), _runtime_names()
    # The package adds reserve/landed helpers to Participant at import (python/wtx/__init__).
    assert set(stub) == set(runtime), (set(stub) ^ set(runtime))
    for name, members in runtime.items():
        if members is None:
            continue
        assert members <= stub[name], (name, sorted(members - stub[name]))
        assert stub[name] <= members | {"code", "message", "details"}, (
            name, sorted(stub[name] - members))


def test_PublicClassesAndMethodsHaveDocstrings():
    missing = []
    for mod in (wtx, wtx.vllm, wtx.sglang, wtx.torch_dist):
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not (obj.__doc__ or "").strip():
                missing.append(f"{mod.__name__}.{name}")
            if inspect.isclass(obj) and obj.__module__.startswith("wtx."):
                for k, v in vars(obj).items():
                    if k.startswith("_") or not callable(v) or inspect.isclass(v):
                        continue
                    if not (getattr(v, "__doc__", "") or "").strip():
                        missing.append(f"{mod.__name__}.{name}.{k}")
    assert not missing, missing
