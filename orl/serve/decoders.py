"""What the server needs from each kind of decoder it serves, so the app has no branch per kind:
a request's settings checked against the decoder (an APIError naming the problem, before queueing),
the context slots a request takes, and what /v1/dlm/info lists.

- BlockServed: dlmrt's Engine over a block-diffusion checkpoint (DecodeConfig; the live page's decoder).
- CanvasServed: a DiffusionGemma CanvasDecoder (CanvasConfig: max_tokens, seed, steps, entropy bound).
- ARServed: the ARDecoder (ARConfig) over an autoregressive checkpoint, plain or prompt-lookup speculative,
  or over a block-diffusion checkpoint decoding self-speculatively (its AR path's tokens). The drafter and
  its length are the server's; a request sets max_tokens, temperature, seed and stop.
"""
from __future__ import annotations

import dataclasses
import math
import secrets

from orl.engine import DecodeConfig, Engine, layouts
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.canvas import CanvasConfig, CanvasDecoder
from orl.engine.config import RULES
from orl.model.residual import RESIDUAL_MODES
from orl.serve.protocol import APIError, DlmParams, request_field


def checked(engine, cfg, steps: bool):
    """cfg checked by the decoder itself (what it would refuse only once the job runs: a rule the model cannot
    run, a self-draft without a diffusion path, ...); steps: the step stream's traces."""
    try:
        return engine.check(cfg, trace=steps)
    except ValueError as e:  # an UnsupportedSetting names its field; traces (/v1/dlm/stream) have none
        raise APIError(400, str(e), param=request_field(getattr(e, "field", None)), code="unsupported_value") from e


def fresh_seed(cfg, req: DlmParams):
    """Sampling without a seed gets a fresh one (returned with the answer, so the sample can be reproduced)."""
    return dataclasses.replace(cfg, seed=secrets.randbits(63)) if cfg.draws and req.seed is None else cfg


class BlockServed:
    kind = "block_diffusion"

    def __init__(self, engine: Engine, defaults: DecodeConfig, name: str = "this model"):
        self.engine, self.defaults, self.name = engine, defaults.validate(), name
        # the adapter lives inside the body (Transformer.model.residual_adapter), wherever a transform nests it
        self.has_adapter = any(n.rsplit(".", 1)[-1] == "residual_adapter" for n, _ in engine.model.named_modules())
        self.residual_modes = [m for m in RESIDUAL_MODES if m != "adapter" or self.has_adapter]
        self.rules = [r for r in RULES if self.runnable(r)]

    def runnable(self, rule: str) -> bool:
        """Whether a request may choose this rule on this model and layout (/v1/dlm/info lists only those, so
        the page offers no rule that is a 400: fast_dllm_v2 needs a shifted model, llada21 / fast_dllm_v2 the
        block layouts); dream_origin with the confidence 'random' it needs (a request sends `confidence`), its
        sub-block length aside."""
        confidence = "random" if rule == "dream_origin" else self.defaults.confidence
        try:
            self.engine.check(dataclasses.replace(self.defaults, rule=rule, confidence=confidence,
                                                  small_block_size=self.defaults.block_len))
        except ValueError:
            return False
        return True

    def config(self, req: DlmParams, steps: bool) -> DecodeConfig:
        cfg = checked(self.engine, req.decode_config(self.defaults), steps)
        if cfg.residual == "adapter" and not self.has_adapter:
            raise APIError(400, f"residual mode 'adapter' needs a model with adapter weights, and {self.name!r} "
                                f"has none; use one of {self.residual_modes}", param="residual", code="unsupported_value")
        return fresh_seed(cfg, req)  # temperature > 0, or alg_temp's drawn positions

    def context_need(self, cfg: DecodeConfig, n_prompt: int) -> tuple[int, str]:
        """(cache slots the engine will check against the context, how the answer was rounded): the engine's own
        plan (orl.engine.layouts), so that the server refuses exactly what the engine would."""
        L, N = cfg.block_len, cfg.max_new_tokens
        if cfg.layout == "full_sequence":
            return n_prompt + N, ""
        plan = layouts.plan([[0] * n_prompt], cfg.layout, L, N)
        tail = n_prompt - plan.P
        inside = f", the prompt's last {tail} inside the first" if tail else ""
        return plan.P + plan.n_blocks * L, f"(rounded up to {plan.n_blocks} block(s) of {L}{inside})"


class CanvasServed:
    kind = "canvas"
    rules = ["canvas"]
    residual_modes: list[str] = []

    def __init__(self, engine: CanvasDecoder, defaults: CanvasConfig):
        self.engine, self.defaults = engine, defaults.validate()

    def config(self, req: DlmParams, steps: bool) -> CanvasConfig:
        cfg = checked(self.engine, req.canvas_config(self.defaults), steps)
        return fresh_seed(cfg, req)  # canvas decoding always samples

    def context_need(self, cfg: CanvasConfig, n_prompt: int) -> tuple[int, str]:
        n = math.ceil(cfg.max_new_tokens / self.engine.canvas)
        return n_prompt + n * self.engine.canvas, f"(rounded up to {n} canvas(es) of {self.engine.canvas})"


class ARServed:
    kind = "autoregressive"
    rules: list[str] = []
    residual_modes: list[str] = []

    def __init__(self, engine: ARDecoder, defaults: ARConfig):
        self.engine, self.defaults = engine, engine.check(defaults)  # a self-draft the checkpoint cannot make: now

    def config(self, req: DlmParams, steps: bool) -> ARConfig:
        return fresh_seed(checked(self.engine, req.ar_config(self.defaults), steps), req)

    def context_need(self, cfg: ARConfig, n_prompt: int) -> tuple[int, str]:
        # the fused self-draft's scratch slots lie past the context (storage, no positions): not counted
        return n_prompt + cfg.max_new_tokens, ""


Served = BlockServed | CanvasServed | ARServed


def served(engine, defaults=None, name: str = "this model") -> Served:
    """The serving side of a decoder; defaults: the decoder's config type (None: its defaults); name: the
    served model id, for errors."""
    if isinstance(engine, CanvasDecoder):
        return CanvasServed(engine, defaults or CanvasConfig())
    if isinstance(engine, ARDecoder):
        return ARServed(engine, defaults or ARConfig())
    return BlockServed(engine, defaults or DecodeConfig(), name)
