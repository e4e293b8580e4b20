"""Double of sglang/srt/plugins/__init__.py (v0.5.12.post1, 1-140): load_plugins() runs every
`sglang.srt.plugins` entry point once per process ($SGLANG_PLUGINS restricts them); a plugin that
fails is logged, not raised. SGLang calls it first in Engine.__init__ and in
run_scheduler_process, before the Scheduler is built."""

import logging
import os
from importlib.metadata import entry_points

logger = logging.getLogger("sglang.srt.plugins")
GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"
_plugins_loaded = False


def load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    allowed = os.environ.get("SGLANG_PLUGINS")
    allowed_set = {x.strip() for x in allowed.split(",") if x.strip()} if allowed else None
    for ep in entry_points(group=GENERAL_PLUGINS_GROUP):
        if allowed_set is not None and ep.name not in allowed_set:
            continue
        try:
            func = ep.load()
            func()
        except Exception:
            logger.exception("Failed to execute general plugin: %s", ep.name)
