"""Double of vllm/plugins/__init__.py (vllm-project/vllm a27dcf13): load_general_plugins
loads every entry point of group "vllm.general_plugins" (filtered by $VLLM_PLUGINS), once per
process (56-60: an entry point that fails to import is logged), and calls each plugin with no
try around the call (77-78): a plugin that raises stops the process that loads it."""

import logging
import os
from importlib.metadata import entry_points

logger = logging.getLogger("vllm.plugins")
DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
plugins_loaded = False


def load_plugins_by_group(group: str) -> dict:
    allowed = os.environ.get("VLLM_PLUGINS")
    allowed_names = None if allowed is None else allowed.split(",")
    out = {}
    for plugin in entry_points(group=group):
        if allowed_names is not None and plugin.name not in allowed_names:
            continue
        try:
            out[plugin.name] = plugin.load()
        except Exception:
            logger.exception("Failed to load plugin %s", plugin.name)
    return out


def load_general_plugins() -> None:
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).values():
        func()
