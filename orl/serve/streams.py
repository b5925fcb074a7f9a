"""Request side of a job: waiting for engine events under a deadline, and the two SSE streams built
from them (OpenAI chunks, one per committed block; the web page's per-step events)."""
from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator, Awaitable, Callable

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from orl.engine import BlockEvent, DoneEvent, Event, StepEvent
from orl.model.kv_cache import CacheBudgetError
from orl.serve.protocol import APIError
from orl.serve.responses import ChatDeltaChoice, CompletionChoice, Response, Usage, finish_reason
from orl.serve.worker import EngineWorker, ErrorEvent, Job

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: dict | str) -> str:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def engine_error(e: Exception) -> APIError:
    # the server validates requests before queuing them, so a ValueError here is still the request's fault
    if isinstance(e, CacheBudgetError):  # sized only when the job runs: prompt + answer over ORL_KV_CACHE_GIB
        return APIError(400, str(e), param="max_tokens", code="context_length_exceeded")
    if isinstance(e, ValueError):
        return APIError(400, str(e))
    return APIError(500, f"generation failed: {type(e).__name__}: {e}", type="server_error")


async def next_event(worker: EngineWorker, job: Job, deadline: float, timeout_s: float) -> Event:
    """The job's next engine event; past the deadline the job is cancelled and the request gets a 504."""
    try:
        async with asyncio.timeout_at(deadline):
            event = await job.events.get()
    except TimeoutError:
        worker.cancel(job)
        raise APIError(504, f"the request did not finish within the server's timeout of {timeout_s:g} s "
                            "(time waiting in the queue included)", type="server_error", code="timeout") from None
    if isinstance(event, ErrorEvent):
        raise engine_error(event.error)
    return event


class JobStreamingResponse(StreamingResponse):
    """Cancels its job however the response ends: finished, failed, or the client went away (Starlette
    then cancels the body task, or the next send fails); the worker stops at its next check."""

    def __init__(self, content: AsyncIterator[str], worker: EngineWorker, job: Job):
        super().__init__(content, media_type="text/event-stream", headers=SSE_HEADERS)
        self.worker, self.job = worker, job

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.worker.cancel(self.job)


def text_delta(sent: str, text: str) -> str:
    """Text not sent yet. A multi-byte character split across blocks decodes to U+FFFD at the end;
    it is held back until a later block completes it."""
    stable = text.rstrip("\ufffd")
    return stable[len(sent):] if stable.startswith(sent) else ""


async def openai_stream(events: Callable[[], Awaitable[Event]], first: Event, rid: str, model: str,
                        chat: bool, include_usage: bool, seed: int | None = None) -> AsyncIterator[str]:
    obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(text: str, finish=None, role: bool = False) -> str:
        if chat:
            # like OpenAI, the chunk that carries finish_reason has an empty delta unless text is left
            delta = {"role": "assistant", "content": text} if role else ({"content": text} if text or finish is None else {})
            choice = ChatDeltaChoice(delta=delta, finish_reason=finish)
        else:
            choice = CompletionChoice(text=text, finish_reason=finish)
        return sse(Response(id=rid, object=obj, model=model, choices=[choice], seed=seed).model_dump())

    if chat:
        yield chunk("", role=True)
    sent, event = "", first
    try:
        while not isinstance(event, DoneEvent):
            if isinstance(event, BlockEvent):
                delta = text_delta(sent, event.text[0])
                sent += delta
                if delta:  # a block of only EOS, or a stop string's held-back prefix: nothing to send yet
                    yield chunk(delta)
            event = await events()
    except APIError as e:  # headers are out already: report in-band, as OpenAI does
        yield sse(e.body())
        yield sse("[DONE]")
        return
    gen = event.generations[0]
    yield chunk(gen.text[len(sent):], finish_reason(gen))
    if include_usage:
        yield sse(Response(id=rid, object=obj, model=model, choices=[], usage=Usage.of(gen), seed=seed).model_dump())
    yield sse("[DONE]")


async def dlm_stream(events: Callable[[], Awaitable[Event]], first: Event, job: Job, tokenizer,
                     info: dict) -> AsyncIterator[str]:
    """Web page events: start, step (canvas of the current block and what the step committed), block
    (committed text so far), done (final text and usage). Live forwards are the engine's count
    (denoising steps, plus a commit forward per finished block unless it is fused), as DESIGN section 5
    does; live times are taken on the worker when the event was produced, so a slow reader does not
    distort them."""
    yield sse({"type": "start", **info})
    steps, done_tokens, event = 0, 0, first
    try:
        while not isinstance(event, DoneEvent):
            elapsed = event.at - job.started_at
            if isinstance(event, StepEvent):
                steps += 1
                kind, tokens, extra = "step", done_tokens + event.resolved, event.record.to_dict(tokenizer)
            else:
                done_tokens = tokens = len(event.token_ids[0])
                kind, extra = "block", {"text": event.text[0]}
            forwards = event.forwards  # the engine's count: no commit forward of its own when fused
            yield sse({**extra, "type": kind, "block": event.block, "generated": tokens,
                       "forwards": forwards, "tpf": round(tokens / max(forwards, 1), 4),
                       "tokens_per_s": round(tokens / elapsed, 2) if elapsed > 0 else 0.0,
                       "elapsed_s": round(elapsed, 4)})
            event = await events()
    except APIError as e:
        yield sse({"type": "error", **e.body()})
        return
    gen = event.generations[0]
    yield sse({"type": "done", "text": gen.text, "finish_reason": finish_reason(gen),
               "usage": Usage.of(gen).model_dump(), "tokens_per_s": round(gen.tokens_per_s, 2),
               "elapsed_s": round(gen.total_s, 4), "block_steps": gen.block_steps})
