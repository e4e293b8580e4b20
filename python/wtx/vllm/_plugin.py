"""wtx as a vLLM plugin: `register()` is the `vllm.general_plugins` entry point (the package
metadata declares `wtx = "wtx.vllm:register"`), so every vLLM process loads it (the API server,
the engine core, every worker; vLLM calls load_general_plugins in each before it builds a
worker or an engine). It

* registers the "wtx" worker engine with WeightTransferEngineFactory and the "wtx" trainer
  engine with WeightTransferTrainerFactory (both idempotent: a process that loads the plugin
  twice, or a name that already loads wtx's class, is left as it is; a name another engine
  took raises naming it);
* refuses vLLM's older contract (engines without start/finish, before 0.25) naming the version:
  wtx could begin an update there but never commit it;
* hooks the serving gate into vLLM's own code (docs/vllm.md, "The serving gate"), each hook a
  wrapper that defers to vLLM's function and is a no-op unless the weight-transfer engine is
  wtx's:
  - Worker.finish_weight_update: a wtx finish that raised (the update aborted on every rank)
    still ends the worker's session (its flag cleared, its target reset), so the next update
    can start: vLLM leaves the session set after an engine's finish raised;
  - Worker.wtx_serving_state (new): the engine's serving state, for collective_rpc;
  - Worker.execute_model: refused (RuntimeError naming the rank and why) while the rank's
    bytes are not a committed version (an outside hold alone, the fleet's staleness gate, is
    enforced by the engine core's pause, below: the bytes are still a committed version);
  - EngineCore.step / step_with_batch_queue: at most every $WTX_VLLM_GATE_INTERVAL_S seconds
    (default 1) the gate is asked before the step, so a hold that came between updates (the
    fleet's, set by a thread of the worker) pauses the scheduler as vLLM's own pause does
    instead of failing the step, and wtx's pause is lifted once every rank serves;
  - EngineCore.resume_scheduler: refused while any rank holds (generation stays paused);
  - EngineCore.set_weight_version / get_weight_version: a version is set, and read, only while
    every rank serves the version wtx committed (/weight_info answers an error otherwise).
Hooks whose vLLM module does not import (an older layout, the API process) are skipped; the
engine itself refuses to initialize where the worker hook is missing (gate_missing()).
"""

import functools
import importlib
import logging
import os
import time
from typing import Any, Callable, List, Optional

from .. import Error

logger = logging.getLogger("wtx.vllm")
_HOOKED = "__wtx_hook__"


def _vllm_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _vllm_version() -> str:
    m = _vllm_module("vllm")
    return getattr(m, "__version__", "unknown") if m is not None else "not installed"


def check_contract() -> None:
    """Raises wtx.Error E_UNSUPPORTED naming vLLM's version when its weight-transfer engines
    have no start/finish (vLLM before 0.25)."""
    base = _vllm_module("vllm.distributed.weight_transfer.base")
    engine = getattr(base, "WeightTransferEngine", None)
    if engine is None:
        raise Error("E_UNAVAILABLE", "wtx.vllm.register: vLLM's weight transfer "
                    "(vllm.distributed.weight_transfer) is not importable (vLLM "
                    f"{_vllm_version()})")
    if not hasattr(engine, "start_weight_update") or not hasattr(engine, "finish_weight_update"):
        raise Error("E_UNSUPPORTED", f"wtx.vllm.register: vLLM {_vllm_version()} has the older "
                    "weight-transfer contract (one receive_weights per update, no "
                    "start_weight_update/finish_weight_update): wtx could begin an update "
                    "there but never commit it. Upgrade vLLM to 0.25 or later (main).")


def _register_in(factory: Any, name: str, module: str, cls_name: str, what: str) -> None:
    registry = getattr(factory, "_registry", {})
    if name in registry:
        existing = registry[name]()
        if existing.__module__.startswith("wtx.vllm") and existing.__qualname__ == cls_name:
            return
        raise Error("INVALID_ARGUMENT", f"wtx.vllm.register: '{name}' is already vLLM's {what} "
                    f"{existing.__module__}.{existing.__qualname__}")
    factory.register_engine(name, module, cls_name)


def register(name: str = "wtx") -> None:
    """Registers wtx's worker and trainer engines with vLLM under `name` and installs the
    serving gate's hooks (module docstring). Idempotent. Raises wtx.Error E_UNAVAILABLE when
    vLLM is not importable, E_UNSUPPORTED for vLLM's older contract, INVALID_ARGUMENT when
    `name` is another engine's."""
    try:
        check_contract()
    except Error as e:
        if e.code != "E_UNSUPPORTED":
            raise
        # vLLM calls every general plugin without a try: raising here would stop every vLLM
        # process from starting, wtx configured or not. Logged; only the engine's name is
        # registered, so a server configured with backend "wtx" gets the engine's own
        # refusal (naming the version) and any other server runs as if wtx were absent.
        logger.warning("%s; wtx registers no serving-gate hook here", e.message)
        _register_refusing_engine(name)
        return
    factory_mod = _vllm_module("vllm.distributed.weight_transfer.factory")
    factory = getattr(factory_mod, "WeightTransferEngineFactory", None)
    if factory is None:
        raise Error("E_UNAVAILABLE", "wtx.vllm.register: vLLM's WeightTransferEngineFactory is "
                    "not importable")
    _register_in(factory, name, "wtx.vllm", "WtxWeightTransferEngine", "weight-transfer engine")
    trainer_factory = getattr(factory_mod, "WeightTransferTrainerFactory", None)
    if trainer_factory is not None:
        _register_in(trainer_factory, name, "wtx.vllm", "WtxTrainerWeightTransferEngine",
                     "trainer engine")
    install_hooks()


def _register_refusing_engine(name: str) -> None:
    """vLLM's older contract: the "wtx" name loads the engine, whose construction there
    refuses naming the version (never silently a backend that cannot commit)."""
    factory_mod = _vllm_module("vllm.distributed.weight_transfer.factory")
    factory = getattr(factory_mod, "WeightTransferEngineFactory", None)
    try:
        if factory is not None and name not in getattr(factory, "_registry", {}):
            factory.register_engine(name, "wtx.vllm", "WtxWeightTransferEngine")
    except Exception as e:  # an older factory's signature: nothing to refuse through
        logger.warning("wtx.vllm.register: vLLM %s's factory did not take the 'wtx' engine "
                       "(%s)", _vllm_version(), e)


# ------------------------------------------------------------------------------- the hooks

def _wtx_engine(worker: Any) -> Any:
    """The worker's weight-transfer engine when it is wtx's (its class says so: this module
    does not import the engine, which imports it), else None."""
    engine = getattr(worker, "weight_transfer_engine", None)
    return engine if getattr(type(engine), "__wtx_engine__", False) else None


def _wrap(cls: Any, attr: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    original = getattr(cls, attr, None)
    if original is None or getattr(original, _HOOKED, False):
        return
    wrapped = functools.wraps(original)(make(original))
    setattr(wrapped, _HOOKED, True)
    setattr(cls, attr, wrapped)


def _holding(states: List[Any]) -> List[Any]:
    return [s for s in states if isinstance(s, dict) and not s.get("serving", True)]


def _held_message(what: str, held: List[Any]) -> str:
    return f"wtx: {what}: " + "; ".join(f"rank {s.get('rank')} does not serve: {s.get('reason')}"
                                         for s in held)


# The worker calls of an update; the engine core checks the gate after each.
_UPDATE_RPCS = frozenset({"init_weight_transfer_engine", "start_weight_update",
                          "update_weights", "finish_weight_update"})
_GATE_AFTER = frozenset({"init_weight_transfer_engine", "finish_weight_update"})


def _hook_worker(worker_cls: Any) -> None:
    def update(original: Callable[..., Any]) -> Callable[..., Any]:
        def update_weights(self: Any, *args: Any, **kwargs: Any) -> Any:
            engine: Any = _wtx_engine(self)
            if engine is not None and not getattr(self, "_weight_update_active", True):
                # vLLM's worker refuses this rank's chunk (no session here) while the other
                # ranks receive it: this rank still takes its part (receives and drops the
                # chunk, exchanges its failure), so every rank aborts now, naming it, instead
                # of waiting on a collective this rank never joins.
                engine.refuse_update(kwargs.get("update_info", args[0] if args else None),
                                     "update_weights without an open session on this worker")
            return original(self, *args, **kwargs)
        return update_weights

    def finish(original: Callable[..., Any]) -> Callable[..., Any]:
        def finish_weight_update(self: Any, *args: Any, **kwargs: Any) -> Any:
            engine: Any = _wtx_engine(self)
            if engine is not None and not getattr(self, "_weight_update_active", True):
                engine.refuse_finish("finish_weight_update without an open session on this "
                                     "worker")
            try:
                return original(self, *args, **kwargs)
            except BaseException:
                if engine is not None:
                    # Whatever raised, the session ends alike on every rank: nothing of the
                    # update stays open here (wtx aborted it on every rank, or ends it now).
                    engine.end_open_update()
                    self._weight_update_active = False
                    engine.reset_weight_update_target()
                raise
        return finish_weight_update

    def execute(original: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
            engine: Any = _wtx_engine(self)
            if engine is not None:
                state = engine.serving_state()
                if not state["serving"] and not state.get("policy_hold"):
                    raise RuntimeError(_held_message("execute_model refused", [state]))
            return original(self, *args, **kwargs)
        return execute_model

    def slept(original: Callable[..., Any]) -> Callable[..., Any]:
        def sleep(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(self, *args, **kwargs)
            engine: Any = _wtx_engine(self)
            if engine is not None:
                engine.weights_released("sleep")  # offloaded or discarded: not vouched for
            return out
        return sleep

    def woke(original: Callable[..., Any]) -> Callable[..., Any]:
        def wake_up(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = original(self, *args, **kwargs)
            engine: Any = _wtx_engine(self)
            tags = kwargs.get("tags", args[0] if args else None)
            if engine is not None and (tags is None or "weights" in tags):
                engine.weights_resumed("wake_up")  # proven against the committed version
            return out
        return wake_up

    _wrap(worker_cls, "sleep", slept)
    _wrap(worker_cls, "wake_up", woke)
    _wrap(worker_cls, "update_weights", update)
    _wrap(worker_cls, "finish_weight_update", finish)
    _wrap(worker_cls, "execute_model", execute)
    if not hasattr(worker_cls, "wtx_serving_state"):
        def wtx_serving_state(self: Any) -> Optional[dict]:
            """The wtx engine's serving state on this worker (None: not a wtx engine)."""
            engine: Any = _wtx_engine(self)
            return engine.serving_state() if engine is not None else None
        worker_cls.wtx_serving_state = wtx_serving_state


def _hook_engine_core(core_cls: Any) -> None:
    def states(core: Any) -> List[Any]:
        try:
            return list(core.collective_rpc("wtx_serving_state"))
        except Exception as e:  # workers without the hook (no wtx engine): nothing held
            logger.debug("wtx_serving_state: %s", e)
            return []

    def refused_while_held(what: Callable[..., str], paused_while_waking: bool = False
                           ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """A wrapper of an EngineCore method that raises, naming each rank and why, while any
        rank holds; `what(*args)` says what was refused. With paused_while_waking, the call
        vLLM makes itself inside wake_up leaves the scheduler paused instead of raising (the
        wake-up succeeds; wtx lifts that pause once every rank serves)."""
        def make(original: Callable[..., Any]) -> Callable[..., Any]:
            def refusing(self: Any, *args: Any, **kwargs: Any) -> Any:
                held = _holding(states(self))
                if held and paused_while_waking and getattr(self, "_wtx_waking", False):
                    self._wtx_paused = True
                    logger.warning(_held_message(what(*args), held))
                    return None
                if held:
                    raise RuntimeError(_held_message(what(*args), held))
                return original(self, *args, **kwargs)
            return refusing
        return make

    def gated(original: Callable[..., Any]) -> Callable[..., Any]:
        def collective_rpc(self: Any, method: Any, *args: Any, **kwargs: Any) -> Any:
            # The gate is asked after an update call that raised (an abort: hold) and after
            # each finish or init (a commit may lift wtx's pause); a chunk that went through
            # changes neither, so it costs no extra round trip.
            ok = False
            try:
                out = original(self, method, *args, **kwargs)
                ok = True
                return out
            finally:
                if isinstance(method, str) and method in _UPDATE_RPCS and (
                        not ok or method in _GATE_AFTER):
                    _hold_or_release(self, states(self))
        return collective_rpc

    def versioned(original: Callable[..., Any]) -> Callable[..., Any]:
        def set_weight_version(self: Any, version: str, *args: Any, **kwargs: Any) -> Any:
            current = states(self)
            held = _holding(current)
            if held:
                raise RuntimeError(_held_message(f"weight version '{version}' refused", held))
            if any(isinstance(s, dict) and s.get("last_outcome") == "noop" for s in current):
                # The round wrote nothing: the served bytes are the previous label's.
                logger.info("wtx: weight version '%s' not published: the update wrote nothing "
                            "(noop); the previous label stays", version)
                return None
            return original(self, version, *args, **kwargs)
        return set_weight_version

    def waking(original: Callable[..., Any]) -> Callable[..., Any]:
        def wake_up(self: Any, *args: Any, **kwargs: Any) -> Any:
            # vLLM resumes the scheduler inside wake_up; while a rank holds (its weights not
            # proven), that resume pauses instead of failing the wake-up.
            self._wtx_waking = True
            try:
                return original(self, *args, **kwargs)
            finally:
                self._wtx_waking = False
                _hold_or_release(self, states(self))
        return wake_up

    def owned(original: Callable[..., Any]) -> Callable[..., Any]:
        def pause_scheduler(self: Any, *args: Any, **kwargs: Any) -> Any:
            self._wtx_paused = False  # a pause asked for now is its caller's to lift
            return original(self, *args, **kwargs)
        return pause_scheduler

    def stepping(original: Callable[..., Any]) -> Callable[..., Any]:
        def step(self: Any, *args: Any, **kwargs: Any) -> Any:
            now = time.monotonic()
            if now - getattr(self, "_wtx_gate_checked", float("-inf")) >= _gate_interval():
                self._wtx_gate_checked = now
                _hold_or_release(self, states(self))
            return original(self, *args, **kwargs)
        return step

    _wrap(core_cls, "collective_rpc", gated)
    _wrap(core_cls, "step", stepping)
    _wrap(core_cls, "step_with_batch_queue", stepping)
    _wrap(core_cls, "wake_up", waking)
    _wrap(core_cls, "pause_scheduler", owned)
    _wrap(core_cls, "resume_scheduler", refused_while_held(lambda *a: "generation stays paused",
                                                           paused_while_waking=True))
    _wrap(core_cls, "set_weight_version", versioned)
    _wrap(core_cls, "get_weight_version", refused_while_held(lambda *a: "not ready"))


def _gate_interval() -> float:
    """Seconds between the engine core's gate checks before a step
    ($WTX_VLLM_GATE_INTERVAL_S, default 1; 0: before every step)."""
    raw = os.environ.get("WTX_VLLM_GATE_INTERVAL_S", "1")
    try:
        return max(0.0, float(raw))
    except ValueError:
        logger.warning("wtx: $WTX_VLLM_GATE_INTERVAL_S=%r is not a number of seconds; the "
                       "gate is checked every 1 s", raw)
        return 1.0


def _hold_or_release(core: Any, states: List[Any]) -> None:
    """After an update call: a rank that holds pauses vLLM's scheduler through the engine core
    (as vLLM's own pause does: requests kept, the prefix cache built on other weights cleared),
    so the core never runs a step the workers would refuse; the pause wtx made is lifted once
    every rank serves again. A pause the trainer made is the trainer's to lift."""
    held = _holding(states)
    paused = getattr(core, "is_scheduler_paused", lambda: False)()
    if held and not paused:
        try:
            core.pause_scheduler("keep", True)
            core._wtx_paused = True
            logger.warning(_held_message("generation paused", held))
        except Exception as e:  # pragma: no cover - an engine core without pause
            logger.error("wtx: could not pause vLLM's scheduler (%s); the workers refuse "
                         "execute_model instead", e)
    elif not held and states and getattr(core, "_wtx_paused", False):
        core._wtx_paused = False
        core.resume_scheduler()


def gate_missing() -> Optional[str]:
    """Why vLLM's worker in this process could generate on a rank that holds (the serving
    gate's worker hook is not on vLLM's Worker.execute_model), or None when it is in."""
    worker = _vllm_module("vllm.v1.worker.gpu_worker")
    cls = getattr(worker, "Worker", None)
    if cls is None:
        return ("vLLM's Worker (vllm.v1.worker.gpu_worker) is not importable, so the serving "
                "gate cannot refuse its execute_model")
    if not getattr(getattr(cls, "execute_model", None), _HOOKED, False):
        return ("the serving gate is not hooked into vLLM's Worker.execute_model in this "
                "process (wtx.vllm.register() did not run here: register wtx through its "
                "vllm.general_plugins entry point, and keep 'wtx' in $VLLM_PLUGINS if set)")
    return None


def install_hooks() -> None:
    """Installs the serving gate's hooks into vLLM's Worker and EngineCore (idempotent; a
    module that does not import is skipped)."""
    worker = _vllm_module("vllm.v1.worker.gpu_worker")
    if worker is not None and hasattr(worker, "Worker"):
        _hook_worker(worker.Worker)
    core = _vllm_module("vllm.v1.engine.core")
    if core is not None and hasattr(core, "EngineCore"):
        _hook_engine_core(core.EngineCore)
