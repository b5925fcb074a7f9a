"""OpenAI-compatible HTTP API over one dlmrt Engine, plus the live denoising page at `/`.

Every request is validated, tokenized and checked against the context before it is queued, so the
worker only ever sees runnable jobs. See docs/SERVING.md for the API, the extra fields and the
queueing model.
"""
from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from orl.engine import DecodeConfig, Engine, Generation
from orl.engine.config import RULES
from orl.model.residual import RESIDUAL_MODES
from orl.serve.protocol import (APIError, ChatChoice, ChatCompletionRequest, ChatMessage, CompletionChoice,
                                CompletionRequest, DlmStreamRequest, OpenAIParams, Response, Usage,
                                finish_reason, new_id, parse_body)
from orl.serve.streams import JobStreamingResponse, dlm_stream, next_event, openai_stream
from orl.serve.worker import EngineWorker, Job, QueueFull

WEB_DIR = Path(__file__).parent / "web"


def create_app(engine: Engine, model_name: str, *, defaults: DecodeConfig | None = None, queue_size: int = 64,
               timeout_s: float = 600.0, max_body_bytes: int = 1 << 20) -> FastAPI:
    """timeout_s bounds a request from arrival to its last token, queue wait included."""
    defaults = (defaults or DecodeConfig()).validate()
    worker = EngineWorker(engine, queue_size)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        worker.start()
        yield
        worker.stop()

    app = FastAPI(title="orl dlmrt server", lifespan=lifespan)
    app.state.worker = worker

    @app.exception_handler(APIError)
    async def _api_error(_: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        err = APIError(e.status_code, f"{request.method} {request.url.path}: {e.detail}", code=str(e.status_code))
        return JSONResponse(err.body(), status_code=e.status_code, headers=e.headers)

    @app.exception_handler(Exception)
    async def _crash(_: Request, e: Exception) -> JSONResponse:
        err = APIError(500, f"internal error: {type(e).__name__}: {e}", type="server_error")
        return JSONResponse(err.body(), status_code=500)

    async def read(request: Request, model: type):
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            raise APIError(413, f"request body of {declared} bytes exceeds the limit of {max_body_bytes}",
                           code="body_too_large")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > max_body_bytes:
                raise APIError(413, f"request body exceeds the limit of {max_body_bytes} bytes", code="body_too_large")
        return parse_body(bytes(raw), model)

    def check_model(name: str | None) -> None:
        if name is not None and name != model_name:
            raise APIError(404, f"model {name!r} does not exist; this server serves {model_name!r}",
                           param="model", code="model_not_found")

    def prepare(prompt: str, cfg: DecodeConfig, param: str) -> list[int]:
        try:
            ids = engine.encode(prompt)
        except ValueError as e:  # TokenizerError: a character or byte the vocabulary cannot express
            raise APIError(400, f"cannot tokenize the {param}: {e}", param=param, code="invalid_prompt") from e
        if not ids:
            raise APIError(400, f"the {param} is empty after tokenization", param=param, code="invalid_prompt")
        n_blocks = -(-cfg.max_new_tokens // cfg.block_len)
        need = len(ids) + n_blocks * cfg.block_len
        if need > engine.max_len:
            raise APIError(400, f"prompt ({len(ids)} tokens) + max_tokens {cfg.max_new_tokens} (rounded up to "
                                f"{n_blocks} blocks of {cfg.block_len}) = {need} tokens exceeds the model's context "
                                f"of {engine.max_len} tokens", param="max_tokens" if len(ids) < engine.max_len else param,
                           code="context_length_exceeded")
        return ids

    def submit(ids: list[int], cfg: DecodeConfig, steps: bool) -> tuple[Job, partial]:
        loop = asyncio.get_running_loop()
        job = Job(ids, cfg, steps, loop)
        try:
            worker.submit(job)
        except QueueFull as e:
            raise APIError(503, str(e), type="server_error", code="queue_full") from e
        return job, partial(next_event, worker, job, loop.time() + timeout_s, timeout_s)

    async def finish(job: Job, events: partial) -> Generation:
        try:
            while (event := await events())["type"] != "done":
                pass
            return event["generations"][0]
        finally:  # also when this handler is cancelled: the worker must not run on for nobody
            worker.cancel(job)

    async def openai_request(request: Request, chat: bool):
        req: OpenAIParams = await read(request, ChatCompletionRequest if chat else CompletionRequest)
        check_model(req.model)
        cfg = req.decode_config(defaults)
        if chat:
            try:
                prompt = engine.tokenizer.apply_chat_template([m.as_template_input() for m in req.messages])
            except ValueError as e:
                raise APIError(400, f"cannot apply the chat template: {e}", param="messages") from e
        else:
            prompt = req.prompt
        ids = prepare(prompt, cfg, "messages" if chat else "prompt")
        job, events = submit(ids, cfg, steps=False)
        rid = new_id("chatcmpl" if chat else "cmpl")
        if req.stream:
            try:  # wait for the first block so that queue timeouts and engine errors keep their status code
                first = await events()
            except BaseException:
                worker.cancel(job)
                raise
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return JobStreamingResponse(openai_stream(events, first, rid, model_name, chat, include_usage), worker, job)
        gen = await finish(job, events)
        if chat:
            choice = ChatChoice(message=ChatMessage(content=gen.text), finish_reason=finish_reason(gen))
            return Response(id=rid, object="chat.completion", model=model_name, choices=[choice], usage=Usage.of(gen))
        choice = CompletionChoice(text=gen.text, finish_reason=finish_reason(gen))
        return Response(id=rid, object="text_completion", model=model_name, choices=[choice], usage=Usage.of(gen))

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
        cfg = req.decode_config(defaults)
        ids = prepare(req.prompt, cfg, "prompt")
        job, events = submit(ids, cfg, steps=True)
        try:
            first = await events()
        except BaseException:
            worker.cancel(job)
            raise
        info = {"model": model_name, "prompt_tokens": len(ids), "block_len": cfg.block_len,
                "max_tokens": cfg.max_new_tokens}
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
        return {"model": model_name, "max_context": engine.max_len, "defaults": defaults.to_dict(),
                "rules": list(RULES), "residual_modes": list(RESIDUAL_MODES)}

    @app.get("/health")
    async def health():
        s = worker.stats
        return {"status": "ok", "model": model_name, "busy": worker.running is not None, "queued": worker.queued,
                "queue_size": worker.queue_size, "completed": s.completed, "cancelled": s.cancelled, "failed": s.failed}

    @app.get("/", include_in_schema=False)
    async def index():
        return FileResponse(WEB_DIR / "index.html")

    app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")
    return app
