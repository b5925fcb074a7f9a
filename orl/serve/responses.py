"""Wire format of the OpenAI-compatible API's answers: response bodies, usage with the dLLM cost, finish
reasons (the requests and errors: orl.serve.protocol)."""
from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, Field

from orl.engine import Generation


class Usage(BaseModel):
    """OpenAI's token counts (completion tokens include a final EOS, as in DESIGN section 5) plus the
    dLLM cost: model forwards (denoising + commit) and tokens per forward."""
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    forwards: int
    tpf: float

    @classmethod
    def of(cls, gen: Generation) -> "Usage":
        return cls(prompt_tokens=len(gen.prompt_ids), completion_tokens=gen.n_tokens,
                   total_tokens=len(gen.prompt_ids) + gen.n_tokens, forwards=gen.forwards, tpf=round(gen.tpf, 4))


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class ChatMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class ChatDeltaChoice(BaseModel):
    index: int = 0
    delta: dict[str, str]
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class Response(BaseModel):
    id: str
    object: Literal["text_completion", "chat.completion", "chat.completion.chunk"]
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice] | list[ChatChoice] | list[ChatDeltaChoice]
    usage: Usage | None = None
    seed: int | None = None  # dLLM field: the sampling seed used (drawn fresh when none was given); None when greedy


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def finish_reason(gen: Generation) -> Literal["stop", "length"]:
    return "stop" if gen.finished else "length"
