"""Double of vllm/v1/worker/gpu_worker.py, the weight-transfer methods of `Worker` (latest
generation, find_string id 70097890134, with the draft helpers of the merged PR #51316 at
lines 872-888 of upstream's file; load_model from find_string id 54489122067).

The call sequence is vLLM's, including what makes a backend's failure matter:
* load_model builds the engine through the factory, positionally, with the served model;
* _start_weight_update refuses a second start while the session flag is set; a failing start
  resets the target and leaves the flag clear;
* update_weights: a failing chunk clears the session flag and resets the target (a later
  finish is then refused by the worker and never reaches the engine);
* finish_weight_update calls the engine's finish OUTSIDE any try: when it raises, the target is
  not reset and the session flag stays set, so the next start is refused ("already active");
  only after a finish that returns does the worker reset the target and clear the flag;
* every method returns None (collective_rpc's caller never sees an engine's return value).
The model runner is a stand-in (`ModelRunnerDouble`): it holds the served model (and an
optional draft model) and runs a forward for execute_model.
"""

from typing import Any, Dict, List, Optional

import torch

from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory


class ModelRunnerDouble:
    """GPUModelRunner's part the worker's weight-transfer methods use."""

    def __init__(self, model: torch.nn.Module, draft_model: Optional[torch.nn.Module] = None):
        self.model = model
        self.draft_model = draft_model
        self.lora_resets = 0

    def load_model(self, load_dummy_weights: bool = False) -> None:
        pass  # the model was built by the test

    def get_model(self) -> torch.nn.Module:
        return self.model

    def get_draft_model(self) -> Optional[torch.nn.Module]:
        return self.draft_model

    def reset_lora_state(self) -> None:
        self.lora_resets += 1

    def execute_model(self, input_ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.model(input_ids)


class Worker:
    def __init__(self, vllm_config: Any, model_runner: ModelRunnerDouble,
                 device: Any = "cpu") -> None:
        self.vllm_config = vllm_config
        self.speculative_config = getattr(vllm_config, "speculative_config", None)
        self.device = torch.device(device)
        self.model_runner = model_runner
        # Weight transfer engine is created in `load_model` once the model is available.
        self.weight_transfer_engine: Any = None
        self._weight_update_active = False
        self._weight_update_is_draft = False

    # -- model ------------------------------------------------------------------------------

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        self.model_runner.load_model(load_dummy_weights=load_dummy_weights)
        if self.vllm_config.weight_transfer_config is not None:
            self.weight_transfer_engine = WeightTransferEngineFactory.create_engine(
                self.vllm_config.weight_transfer_config, self.vllm_config, self.device,
                self.model_runner.get_model())

    def execute_model(self, scheduler_output: Any) -> Any:
        return self.model_runner.execute_model(scheduler_output)

    # -- sleep mode (vllm-project 35d5cda: sleep 114-136, wake_up 138-160) -------------------

    def sleep(self, level: int = 1) -> None:
        """CuMemAllocator.sleep: level 1 offloads the weights to CPU (restored on wake_up),
        level 2 keeps nothing of them but the model's buffers (saved here); the physical
        memory is unmapped either way (its content, written here as a fixed pattern, is
        undefined until mapped back)."""
        model = self.model_runner.model
        if level == 2:
            self._sleep_saved_buffers = {n: b.cpu().clone() for n, b in model.named_buffers()}
        self._weights_backup = ({n: p.detach().clone() for n, p in model.named_parameters()}
                                if level == 1 else None)
        with torch.no_grad():
            for p in model.parameters():
                p.data.view(torch.uint8).fill_(0x5A)

    def wake_up(self, tags: Optional[List[str]] = None) -> None:
        """CuMemAllocator.wake_up(tags): the weights mapped back (their offloaded content at
        level 1), the saved buffers restored."""
        model = self.model_runner.model
        if tags is None or "weights" in tags:
            backup, self._weights_backup = getattr(self, "_weights_backup", None), None
            if backup is not None:
                with torch.no_grad():
                    for n, p in model.named_parameters():
                        p.copy_(backup[n])
        saved = getattr(self, "_sleep_saved_buffers", {})
        for n, b in model.named_buffers():
            if n in saved:
                b.data.copy_(saved[n])
        self._sleep_saved_buffers = {}

    def get_draft_model(self) -> Optional[torch.nn.Module]:
        return self.model_runner.get_draft_model()

    # -- weight transfer ----------------------------------------------------------------------

    def _check_weight_transfer_engine(self) -> None:
        if self.weight_transfer_engine is None:
            raise RuntimeError("Weight transfer not configured. "
                               "Please set weight_transfer_config to enable weight transfer.")

    def init_weight_transfer_engine(self, init_info: Dict[str, Any]) -> None:
        self._check_weight_transfer_engine()
        typed_init_info = self.weight_transfer_engine.parse_init_info(init_info)
        self.weight_transfer_engine.init_transfer_engine(typed_init_info)

    def start_weight_update(self) -> None:
        self._start_weight_update()

    def start_draft_weight_update(self) -> None:
        self._start_weight_update(is_draft=True)

    def supports_draft_weight_updates(self) -> bool:
        engine = self.weight_transfer_engine
        spec = self.speculative_config
        return (engine is not None and engine.supports_draft_weight_update
                and self.get_draft_model() is not None and spec is not None
                and getattr(spec, "draft_model_config", None) is not None)

    def _set_draft_weight_update_target(self) -> None:
        draft_model = self.get_draft_model()
        if draft_model is None:
            raise RuntimeError("Draft model weight update requested, but no draft model is "
                               "configured.")
        spec = self.speculative_config
        if spec is None or getattr(spec, "draft_model_config", None) is None:
            raise RuntimeError("Draft model weight update requested, but no draft model config "
                               "is configured.")
        self.weight_transfer_engine.set_weight_update_target(draft_model,
                                                             spec.draft_model_config)

    def _start_weight_update(self, is_draft: bool = False) -> None:
        self._check_weight_transfer_engine()
        if is_draft and not self.weight_transfer_engine.supports_draft_weight_update:
            raise RuntimeError(f"{type(self.weight_transfer_engine).__name__} does not support "
                               "draft model weight updates.")
        if self._weight_update_active:
            raise RuntimeError("start_weight_update called while a weight update is already "
                               "active. Call finish_weight_update first.")
        try:
            if is_draft:
                self._set_draft_weight_update_target()
            self.weight_transfer_engine.start_weight_update()
        except BaseException:
            self.weight_transfer_engine.reset_weight_update_target()
            raise
        self._weight_update_active = True
        self._weight_update_is_draft = is_draft

    def update_weights(self, update_info: Dict[str, Any]) -> None:
        self._check_weight_transfer_engine()
        if not self._weight_update_active:
            raise RuntimeError("start_weight_update must be called before update_weights.")
        try:
            self.weight_transfer_engine.update_weights(update_info)
        except BaseException:
            self._weight_update_active = False
            self.weight_transfer_engine.reset_weight_update_target()
            raise

    def finish_weight_update(self) -> None:
        self._check_weight_transfer_engine()
        if not self._weight_update_active:
            raise RuntimeError("finish_weight_update called without a matching "
                               "start_weight_update.")
        self.weight_transfer_engine.finish_weight_update()  # not in a try: see the docstring
        self.weight_transfer_engine.reset_weight_update_target()
        self._weight_update_active = False
        # Weight transfer bypasses GPUModelRunner.reload_weights().
        if not self._weight_update_is_draft:
            self.model_runner.reset_lora_state()

    def shutdown(self) -> None:
        engine = getattr(self, "weight_transfer_engine", None)
        if engine:
            engine.shutdown()
