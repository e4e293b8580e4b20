"""Double of sglang/srt/managers/scheduler_update_weights_mixin.py at v0.5.12.post1 (upstream
5a15cde8; the release's blob f2daf644def, anchored by THUDM/slime's
docker/patch/v0.5.12.post1/sglang.patch at d87391e3): `class SchedulerUpdateWeightsMixin` (line
44), whose handlers (45-106, check_weights 188-197) the Scheduler inherits and its dispatcher
binds as self.X. The bodies are the double's UpdateHandlers."""

from sglang.srt.managers.update_handlers import UpdateHandlers


class SchedulerUpdateWeightsMixin(UpdateHandlers):
    pass
