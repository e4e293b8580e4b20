"""Issue 43: vLLM finds wtx in every process it starts through the installed distribution's
`vllm.general_plugins` entry point. Run with the interpreter of a venv that pip installed wtx
into, in a fresh process, with only vLLM's doubles (tests/python/vllm_double, written from
vLLM's source) on PYTHONPATH: the entry point is read from the installed metadata, vLLM's own
load_general_plugins() loads it, and vLLM's factory then builds the "wtx" engine, from the venv.
"""

import os
import sys
from importlib.metadata import distribution, entry_points

points = [e for e in entry_points(group="vllm.general_plugins") if e.name == "wtx"]
assert points, "no vllm.general_plugins entry point named wtx in the installed distributions"
assert points[0].value == "wtx.vllm:register", points[0]
assert points[0].dist is not None and points[0].dist.name == "wtx", points[0].dist
print("entry point", points[0].value, "of", distribution("wtx").metadata["Name"],
      distribution("wtx").version)
sglang = [e for e in entry_points(group="sglang.srt.plugins") if e.name == "wtx"]
assert sglang and sglang[0].value == "wtx.sglang:plugin", sglang  # SGLang's plugin group

from vllm.plugins import load_general_plugins  # noqa: E402  (vLLM's double)

load_general_plugins()
from vllm.distributed.weight_transfer.factory import (WeightTransferEngineFactory,  # noqa: E402
                                                      WeightTransferTrainerFactory)

cls = WeightTransferEngineFactory._registry["wtx"]()
trainer = WeightTransferTrainerFactory._registry["wtx"]()
import wtx  # noqa: E402

venv = os.path.realpath(sys.prefix)
assert os.path.realpath(wtx.__file__).startswith(venv), (wtx.__file__, venv)
assert cls.__name__ == "WtxWeightTransferEngine" and cls.__module__.startswith("wtx.vllm"), cls
assert trainer.__name__ == "WtxTrainerWeightTransferEngine", trainer
print("vLLM's factory builds", cls.__module__ + "." + cls.__name__, "from", wtx.__file__)
