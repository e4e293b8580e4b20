"""Double of vllm/plugins/__init__.py (vllm-project/vllm 01425553): load_general_plugins
loads every entry point of group "vllm.general_plugins" (filtered by $VLLM_PLUGINS), once per
process, calling each; a plugin that raises is logged, not re-raised."""

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
    for name, func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).items():
        try:
            func()
        except Exception:
            logger.exception("Failed to load plugin %s", name)
