"""OpenAI-compatible HTTP API over one decoder: a dlmrt Engine, a DiffusionGemma CanvasDecoder or an ARDecoder
(plain, prompt-lookup or self-speculative: orl.serve.decoders), plus the live denoising page at `/`.

Every request is validated, tokenized and checked against the context and the model before it is
queued, so the worker only ever sees runnable jobs and a request cannot produce a 500. See
docs/SERVING.md for the API, the extra fields, the queueing model and the security defaults.
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response as PlainResponse

from orl.engine import DecodeConfig, DoneEvent, Engine, Generation
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.canvas import CanvasConfig, CanvasDecoder
from orl.serve.chat import render_chat
from orl.serve.config import ServerConfig
from orl.serve.decoders import served
from orl.serve.parse import parse_body
from orl.serve.protocol import (APIError, ChatCompletionRequest, CompletionRequest, DlmParams, DlmStreamRequest,
                                OpenAIParams)
from orl.serve.responses import ChatChoice, ChatMessage, CompletionChoice, Response, Usage, finish_reason, new_id
from orl.serve.security import Guard
from orl.serve.streams import JobStreamingResponse, dlm_stream, next_event, openai_stream
from orl.serve.worker import EngineWorker, Job, QueueFull

Config = DecodeConfig | CanvasConfig | ARConfig

WEB_DIR = Path(__file__).parent / "web"
CLIENT_GONE = 499  # nginx's status for "the client closed the connection first"; nobody reads it


class ClientGone(Exception):
    pass


async def until_disconnected(request: Request) -> None:
    """Returns once the client has hung up. Only for after the body was read: the server's receive() then
    blocks until the connection closes (or the response is complete)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(engine: Engine | CanvasDecoder | ARDecoder, model_name: str, *,
               defaults: DecodeConfig | CanvasConfig | ARConfig | None = None,
               config: ServerConfig | None = None) -> FastAPI:
    """defaults: the decoder's own config type (None: its defaults); orl.serve.decoders knows each kind."""
    decoder = served(engine, defaults, model_name)
    defaults = decoder.defaults
    config = (config or ServerConfig()).validate()
    worker = EngineWorker(engine, config.queue_size)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        worker.start()
        yield
        worker.stop()

    docs = {} if config.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="orl dlmrt server", lifespan=lifespan, **docs)
    app.state.worker = worker
    app.add_middleware(Guard, cfg=config)
    if config.cors_origins:  # outermost, so that its headers are on the guard's refusals too
        app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])

    @app.exception_handler(APIError)
    async def _api_error(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(ClientGone)
    async def _client_gone(_: Request, e: ClientGone) -> PlainResponse:
        return PlainResponse(status_code=CLIENT_GONE, headers={"Connection": "close"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        err = APIError(e.status_code, f"{request.method} {request.url.path}: {e.detail}", code=str(e.status_code))
        return JSONResponse(err.body(), status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def _crash(_: Request, e: Exception) -> JSONResponse:
        # a bug, never the request's fault; uvicorn logs the traceback and drops the connection, which
        # `Connection: close` announces, so a client's pooled connection is not reused
        err = APIError(500, f"internal error: {type(e).__name__}: {e}", type="server_error")
        return JSONResponse(err.body(), status_code=500, headers=err.headers)

    async def read(request: Request, model: type):
        limit = config.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise APIError(413, f"request body of {declared} bytes exceeds the limit of {limit}",
                           code="body_too_large", headers={"Connection": "close"})
        raw = bytearray()
        try:
            async with asyncio.timeout(config.read_timeout_s):
                async for chunk in request.stream():
                    raw += chunk
                    if len(raw) > limit:
                        raise APIError(413, f"request body exceeds the limit of {limit} bytes",
                                       code="body_too_large", headers={"Connection": "close"})
        except TimeoutError:
            raise APIError(408, f"the request body did not arrive within {config.read_timeout_s:g} s",
                           code="request_timeout") from None
        except ClientDisconnect:  # hung up mid-body: nothing to answer, nothing to log
            raise ClientGone from None
        return parse_body(bytes(raw), model)

    async def unless_disconnected(request: Request, job: Job, awaitable):
        """awaitable's result; if the client hangs up first, the job is cancelled (it may still be
        waiting in the queue) and the request ends with ClientGone."""
        task, watcher = asyncio.ensure_future(awaitable), asyncio.ensure_future(until_disconnected(request))
        gone = False
        try:
            done, _ = await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
            gone = task not in done
        finally:  # also when this handler itself is cancelled
            watcher.cancel()
            if not task.done():
                task.cancel()
                worker.cancel(job)
        if gone:
            raise ClientGone
        return task.result()

    def check_model(name: str | None) -> None:
        if name is not None and name != model_name:
            raise APIError(404, f"model {name!r} does not exist; this server serves {model_name!r}",
                           param="model", code="model_not_found")

    def prepare(prompt: str, cfg: Config, param: str, req: DlmParams) -> tuple[list[int], Config]:
        """The prompt's ids and the request's config, checked against the context as the decoder will check it
        (orl.serve.decoders' context_need); a request that leaves max_tokens out gets at most what fits."""
        try:
            ids = engine.encode(prompt)
        except ValueError as e:  # TokenizerError: a character or byte the vocabulary cannot express
            raise APIError(400, f"cannot tokenize the {param}: {e}", param=param, code="invalid_prompt") from e
        if not ids:
            raise APIError(400, f"the {param} is empty after tokenization", param=param, code="invalid_prompt")
        need, rounding = decoder.context_need(cfg, len(ids))
        if need <= engine.max_len:
            return ids, cfg
        fits = most_that_fits(cfg, len(ids))
        if fits and req.one_max().max_tokens is None:  # as OpenAI and vLLM: the default stops at the context
            return ids, dataclasses.replace(cfg, max_new_tokens=fits)
        raise APIError(400, f"prompt ({len(ids)} tokens) + max_tokens {cfg.max_new_tokens}"
                            f"{' ' + rounding if rounding else ''} = {need} tokens exceeds the model's context "
                            f"of {engine.max_len} tokens" + (f"; at most {fits} tokens fit" if fits else
                                                              f"; no answer fits after this {param}"),
                       param="max_tokens" if fits else param, code="context_length_exceeded")

    def most_that_fits(cfg: Config, n_prompt: int) -> int:
        """The largest max_tokens below cfg's whose request fits the context (0: none); the need grows with it."""
        lo, hi = 0, cfg.max_new_tokens - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if decoder.context_need(dataclasses.replace(cfg, max_new_tokens=mid), n_prompt)[0] <= engine.max_len:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def submit(ids: list[int], cfg: DecodeConfig | CanvasConfig | ARConfig, steps: bool) -> tuple[Job, partial]:
        loop = asyncio.get_running_loop()
        job = Job(ids, cfg, steps, loop)
        try:
            worker.submit(job)
        except QueueFull as e:  # one slot frees when the running job ends: about one mean job time
            retry = str(max(1, math.ceil(worker.stats.mean_job_s())))
            raise APIError(503, str(e), type="server_error", code="queue_full", headers={"Retry-After": retry}) from e
        return job, partial(next_event, worker, job, loop.time() + config.timeout_s, config.timeout_s)

    async def finish(job: Job, events: partial) -> Generation:
        try:
            while not isinstance(event := await events(), DoneEvent):
                pass
            return event.generations[0]
        finally:  # also when this handler is cancelled: the worker must not run on for nobody
            worker.cancel(job)

    async def first_event(request: Request, job: Job, events: partial):
        try:  # streams wait for the first block so that queue timeouts and engine errors keep their status code
            return await unless_disconnected(request, job, events())
        except BaseException:
            worker.cancel(job)
            raise

    async def openai_request(request: Request, chat: bool):
        req: OpenAIParams = await read(request, ChatCompletionRequest if chat else CompletionRequest)
        check_model(req.model)
        cfg = decoder.config(req, steps=False)
        prompt = render_chat(engine.tokenizer, req.messages) if chat else req.prompt
        ids, cfg = prepare(prompt, cfg, "messages" if chat else "prompt", req)
        job, events = submit(ids, cfg, steps=False)
        rid = new_id("chatcmpl" if chat else "cmpl")
        seed = cfg.seed if cfg.draws else None
        if req.stream:
            first = await first_event(request, job, events)
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            stream = openai_stream(events, first, rid, model_name, chat, include_usage, seed=seed)
            return JobStreamingResponse(stream, worker, job)
        gen = await unless_disconnected(request, job, finish(job, events))
        if chat:
            choice = ChatChoice(message=ChatMessage(content=gen.text), finish_reason=finish_reason(gen))
            return Response(id=rid, object="chat.completion", model=model_name, choices=[choice], usage=Usage.of(gen),
                            seed=seed)
        choice = CompletionChoice(text=gen.text, finish_reason=finish_reason(gen))
        return Response(id=rid, object="text_completion", model=model_name, choices=[choice], usage=Usage.of(gen),
                        seed=seed)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await openai_request(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await openai_request(request, chat=True)

    @app.post("/v1/dlm/stream")
    async def dlm(request: Request):
        req: DlmStreamRequest = await read(request, DlmStreamRequest)
        check_model(req.model)
        cfg = decoder.config(req, steps=True)
        ids, cfg = prepare(req.prompt, cfg, "prompt", req)
        job, events = submit(ids, cfg, steps=True)
        first = await first_event(request, job, events)
        info = {"model": model_name, "prompt_tokens": len(ids), "block_len": cfg.block_len,
                "max_tokens": cfg.max_new_tokens, "seed": cfg.seed if cfg.draws else None}
        return JobStreamingResponse(dlm_stream(events, first, job, engine.tokenizer, info), worker, job)

    def model_card() -> dict:
        return {"id": model_name, "object": "model", "created": created, "owned_by": "orl",
                "max_context": engine.max_len}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str):
        check_model(name)
        return model_card()

    @app.get("/v1/dlm/info")
    async def info():
        return {"model": model_name, "max_context": engine.max_len, "decoder": decoder.kind,
                "defaults": defaults.to_dict(), "rules": decoder.rules, "residual_modes": decoder.residual_modes}

    @app.get("/health")
    async def health():
        s = worker.stats
        return {"status": "ok", "model": model_name, "busy": worker.running is not None, "queued": worker.queued,
                "queue_size": worker.queue_size, "completed": s.completed, "cancelled": s.cancelled, "failed": s.failed,
                "rejected": s.rejected}

    @app.get("/", include_in_schema=False)
    async def index():
        return FileResponse(WEB_DIR / "index.html")

    app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")
    return app
