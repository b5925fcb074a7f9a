"""Wire format of the OpenAI-compatible API's requests: request models, validation, errors (the response
bodies: orl.serve.responses).

Requests are validated strictly (no type coercion, unknown fields rejected, no NaN or infinity) so a
client learns about a typo or an unsupported option instead of silently getting default behaviour.
Bodies are parsed by orl.serve.parse.
"""
from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orl.engine import DecodeConfig
from orl.engine.ar_step import ARConfig
from orl.engine.canvas import CanvasConfig
from orl.engine.config import CONFIDENCES, RULES
from orl.engine.stops import stop_problems
from orl.model.residual import RESIDUAL_MODES


class APIError(Exception):
    """An error answered as OpenAI's {"error": {message, type, param, code}} with an HTTP status."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = dict(headers or {})
        if status in (408, 500):  # the connection may be in any state (unread body, failed handler): no reuse
            self.headers.setdefault("Connection", "close")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


SEED_MIN, SEED_MAX = -(1 << 63), (1 << 63) - 1  # the engine keeps seeds in int64 and hashes all 64 bits
INT_KNOB_MAX = 1 << 31  # integer knobs go to int64 device tensors: a JSON integer past 2**63 would fail there (500)
MAX_POST_STEPS = 1024   # llada21's edit-only steps per block: each is a forward, so bounded (LLaDA2.1's default 16)
MAX_DENOISING_STEPS = 1024  # a canvas's decoder passes (DiffusionGemma's default 48): each is a forward
# the knobs canvas decoding (DiffusionGemma) has, and their CanvasConfig names; any other is refused
CANVAS_KNOBS = {"max_tokens": "max_new_tokens", "seed": "seed", "steps_per_block": "max_denoising_steps",
                "entropy_bound": "entropy_bound"}
# the knobs autoregressive decoding (plain or speculative: the server's ARConfig) has, and their ARConfig names
AR_KNOBS = {"max_tokens": "max_new_tokens", "temperature": "temperature", "seed": "seed", "stop": "stop"}
AR_NEUTRAL = {"top_p": 1.0, "top_k": 0}  # values OpenAI clients send by default that change nothing


class DlmParams(BaseModel):
    """Knobs shared by every generation endpoint. The dLLM ones are extra body fields for OpenAI clients
    (`extra_body=` in the Python client); None means the server's default (from the checkpoint)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    max_tokens: int | None = Field(None, ge=1, le=INT_KNOB_MAX)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    threshold: float | None = Field(None, gt=0.0, le=1.0)
    rule: Literal[RULES] | None = None
    confidence: Literal[CONFIDENCES] | None = None  # what the rule ranks by (`--confidence`); dream_origin: random
    block_len: int | None = Field(None, ge=1, le=INT_KNOB_MAX)
    residual: Literal[RESIDUAL_MODES] | None = None
    steps_per_block: int | None = Field(None, ge=0, le=INT_KNOB_MAX)
    factor: float | None = Field(None, gt=0.0)
    entropy_bound: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)   # OpenAI's field; the others here are extensions
    top_k: int | None = Field(None, ge=0, le=INT_KNOB_MAX)
    alg_temp: float | None = Field(None, ge=0.0)
    editing_threshold: float | None = Field(None, ge=0.0, le=1.0)
    max_post_steps: int | None = Field(None, ge=0, le=MAX_POST_STEPS)
    num_to_transfer: int | None = Field(None, ge=1, le=INT_KNOB_MAX)
    small_block_size: int | None = Field(None, ge=1, le=INT_KNOB_MAX)
    stop: object = None   # OpenAI's stop: a string or a list of strings (orl.engine.stops checks which)

    def one_max(self) -> "DlmParams":
        """The request with its answer budget in max_tokens (chat requests may name it max_completion_tokens)."""
        return self

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        if v is not None and (problems := stop_problems(v)):
            raise ValueError("; ".join(problems))
        return v

    def decode_config(self, defaults: DecodeConfig) -> DecodeConfig:
        knobs = {"max_new_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed,
                 "threshold": self.threshold, "rule": self.rule,
                 # dream_origin ranks by its uniforms and nothing else: a request naming it means that
                 "confidence": self.confidence or ("random" if self.rule == "dream_origin" else None),
                 "block_len": self.block_len,
                 "residual": self.residual, "steps_per_block": self.steps_per_block, "factor": self.factor,
                 "entropy_bound": self.entropy_bound, "top_p": self.top_p, "top_k": self.top_k,
                 "alg_temp": self.alg_temp, "editing_threshold": self.editing_threshold,
                 "max_post_steps": self.max_post_steps, "num_to_transfer": self.num_to_transfer,
                 "small_block_size": self.small_block_size, "stop": self.stop}
        cfg = DecodeConfig(**{**defaults.to_dict(), **{k: v for k, v in knobs.items() if v is not None}})
        try:
            return cfg.validate()
        except ValueError as e:
            raise APIError(400, str(e), param=self._named_field(str(e))) from e

    @classmethod
    def _named_field(cls, message: str) -> str | None:
        """The request field a config's first problem names ("invalid DecodeConfig: steps_per_block (32) must
        ..."), for the error's `param`; None when it names none of them."""
        first = message.split(": ", 1)[-1]
        return next((f for f in cls.model_fields if first.startswith((f + " ", f + ":"))), None)

    def _only(self, knobs: dict, decoder: str, neutral: dict | None = None) -> None:
        """Any knob set outside `knobs` (other than its neutral value) is a 400 naming it, not ignored."""
        for name in DlmParams.model_fields:
            value = getattr(self, name)
            if name not in knobs and value not in (None, []) and (neutral or {}).get(name, object()) != value:
                raise APIError(400, f"{name} does not apply to {decoder}; it takes {', '.join(knobs)}",
                               param=name, code="unsupported_value")  # `stop: []` is no stop

    def canvas_config(self, defaults: CanvasConfig) -> CanvasConfig:
        """The request's settings for canvas decoding (a DiffusionGemma server): max_tokens, seed,
        steps_per_block (its max denoising steps per canvas; 0: the default) and entropy_bound; any other
        knob is a 400 naming it, not ignored."""
        self._only(CANVAS_KNOBS, "canvas decoding (diffusion_gemma)")
        if (self.steps_per_block or 0) > MAX_DENOISING_STEPS:
            raise APIError(400, f"steps_per_block ({self.steps_per_block}) must be <= {MAX_DENOISING_STEPS}: each "
                                "denoising step of a canvas is a forward", param="steps_per_block",
                           code="less_than_equal")
        values = {CANVAS_KNOBS[k]: getattr(self, k) for k in CANVAS_KNOBS if getattr(self, k) is not None}
        if values.get("max_denoising_steps") == 0:  # as `orl generate --steps-per-block 0`: the default
            del values["max_denoising_steps"]
        try:
            return dataclasses.replace(defaults, **values).validate()
        except ValueError as e:  # entropy_bound 0: CanvasConfig needs > 0
            raise APIError(400, str(e), param="entropy_bound" if "entropy_bound" in str(e) else None) from e


    def ar_config(self, defaults: ARConfig) -> ARConfig:
        """The request's settings for autoregressive decoding (an AR checkpoint, or a block-diffusion one served
        self-speculatively): max_tokens, temperature, seed and stop; the drafter and its length are the
        server's (`orl serve --spec-tokens / --spec-draft`). Any other knob is a 400 naming it."""
        self._only(AR_KNOBS, "autoregressive decoding", AR_NEUTRAL)
        values = {AR_KNOBS[k]: getattr(self, k) for k in AR_KNOBS if getattr(self, k) is not None}
        try:
            return dataclasses.replace(defaults, **values).validate()
        except ValueError as e:
            raise APIError(400, str(e)) from e


def request_field(setting: str | None) -> str | None:
    """The request field that sets a DecodeConfig setting (an error's `param`); None for one no request
    sets (the server's compile / cuda_graph) or none at all."""
    name = {"max_new_tokens": "max_tokens"}.get(setting, setting)
    return name if name in DlmParams.model_fields else None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    include_usage: bool = False


class OpenAIParams(DlmParams):
    """OpenAI fields this server has no use for are still declared so that their neutral values (which
    some clients always send) pass, while anything that would change the answer is refused."""

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    n: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: object = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, v: int | None) -> int | None:
        if v is not None and v != 1:
            raise ValueError(f"n={v} is not supported: the server returns exactly one choice (n=1)")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _empty(cls, v):
        if v:
            raise ValueError("not supported by this server")
        return v

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalty(cls, v: float | None) -> float | None:
        if v:
            raise ValueError("penalties are not supported (only 0)")
        return v


class CompletionRequest(OpenAIParams):
    prompt: str
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, v: object) -> object:
        if isinstance(v, list):
            if v and all(isinstance(t, int) and not isinstance(t, bool) for t in v):  # OpenAI's token-id form
                raise ValueError("prompt as token ids is not supported: send the prompt as a string")
            if len(v) != 1:
                raise ValueError(f"got {len(v)} prompts; this server takes one prompt per request")
            v = v[0]
        if not isinstance(v, str):
            raise ValueError(f"prompt must be a string (or a list of one string), got {type(v).__name__}")
        if not v:
            raise ValueError("prompt is empty; give at least one character")
        return v

    @field_validator("echo", "logprobs", "best_of", "suffix")
    @classmethod
    def _unsupported(cls, v, info):
        if v and not (info.field_name == "best_of" and v == 1):
            raise ValueError(f"{info.field_name} is not supported by this server")
        return v


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    role: Literal["system", "developer", "user", "assistant"]
    content: str
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _flatten(cls, v: object) -> object:
        """OpenAI also allows a list of content parts; only text parts can reach a text-only model."""
        if isinstance(v, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in v):
                raise ValueError("content parts must all be {'type': 'text', 'text': <string>}; other kinds are not supported")
            return "".join(p["text"] for p in v)
        return v


class ChatCompletionRequest(OpenAIParams):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1, le=INT_KNOB_MAX)
    logprobs: bool | None = None
    top_logprobs: int | None = None

    @field_validator("logprobs", "top_logprobs")
    @classmethod
    def _unsupported(cls, v, info):
        if v:
            raise ValueError(f"{info.field_name} is not supported by this server")
        return v

    def one_max(self) -> "ChatCompletionRequest":
        """max_completion_tokens (OpenAI's newer name) folded into max_tokens."""
        if self.max_completion_tokens is None:
            return self
        if self.max_tokens is not None and self.max_tokens != self.max_completion_tokens:
            raise APIError(400, "max_tokens and max_completion_tokens disagree; give one of them",
                           param="max_completion_tokens")
        return self.model_copy(update={"max_tokens": self.max_completion_tokens, "max_completion_tokens": None})

    def decode_config(self, defaults: DecodeConfig) -> DecodeConfig:
        return DlmParams.decode_config(self.one_max(), defaults)

    def canvas_config(self, defaults: CanvasConfig) -> CanvasConfig:
        return DlmParams.canvas_config(self.one_max(), defaults)

    def ar_config(self, defaults: ARConfig) -> ARConfig:
        return DlmParams.ar_config(self.one_max(), defaults)


class DlmStreamRequest(DlmParams):
    """Body of POST /v1/dlm/stream (the web page's per-step event stream)."""

    prompt: str = Field(min_length=1)
    model: str | None = None
