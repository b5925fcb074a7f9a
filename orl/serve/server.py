"""`orl serve`: check the settings, bind the port, load a checkpoint, warm the engine up, run the HTTP
server. Everything a user can get wrong on the command line (port, timeouts, device, a port in use)
is refused with a ValueError naming it before the model is loaded; the CLI prints it in one line."""
from __future__ import annotations

import dataclasses
import logging
import socket

from orl.device import resolve_device
from orl.engine import DecodeConfig, Engine
from orl.engine.canvas import CanvasConfig, CanvasDecoder
from orl.serve.app import create_app
from orl.serve.config import ServerConfig
from orl.serve.connection import timed_protocol


def warm_up(engine: Engine | CanvasDecoder, cfg: DecodeConfig | CanvasConfig) -> None:
    """One short decode before the first request: allocates the static buffers of the default shape and
    runs every kernel once. Two blocks where the context allows, so the commit forward runs too. The
    prompt is a single EOS token because it exists in every vocabulary."""
    if isinstance(engine, CanvasDecoder):  # two canvases (the re-encode runs too) of two denoising steps
        n_canvas = 2 if 1 + 2 * engine.canvas <= engine.max_len else 1
        engine.generate_ids([[engine.eos_ids[0]]], dataclasses.replace(
            cfg, max_new_tokens=n_canvas * engine.canvas, max_denoising_steps=min(2, cfg.max_denoising_steps)))
        return
    n_blocks = 2 if 1 + 2 * cfg.block_len <= engine.max_len else 1
    engine.generate_ids([[engine.eos_id]], DecodeConfig(**{**cfg.to_dict(), "max_new_tokens": n_blocks * cfg.block_len}))


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the (possibly long) model load so a port in use fails at once."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        raise ValueError(f"cannot listen on {host!r}: {e.strerror or e}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def uvicorn_server(app, config: ServerConfig, log_level: str = "info"):
    """uvicorn with the header read timeout of orl.serve.connection."""
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port, log_level=log_level,
                                         http=timed_protocol(config.read_timeout_s)))


def serve(model_dir: str, config: ServerConfig | None = None, *, device: str | None = None,
          dtype: str | None = None) -> None:
    """dtype: cast the weights at load (as `orl generate` / `orl eval --dtype`); the served model id is
    then '<dir name>-<dtype>', as eval records name a cast model."""
    from pathlib import Path

    from orl.checkpoint import load_checkpoint, require_objective
    from orl.model.families.common import dtype_from_name

    config = (config or ServerConfig()).validate()
    dev = resolve_device(device)
    cast = dtype_from_name(dtype) if dtype else None  # an unknown name fails before the port and the load
    sock = bind(config.host, config.port)
    try:
        model, tokenizer, manifest = load_checkpoint(model_dir, device=dev, dtype=cast)
        if manifest.get("objective") == CanvasDecoder.objective:  # DiffusionGemma: generation_config.json's defaults
            from orl.engine.canvas_defaults import canvas_decoder

            engine, defaults = canvas_decoder(model_dir, model, tokenizer, manifest)
        else:
            require_objective(manifest, Engine.objective, model_dir)
            engine = Engine(model, tokenizer, manifest=manifest)
            defaults = DecodeConfig.from_manifest(manifest)  # the block length and residual mode it was trained for
        warm_up(engine, defaults)
        name = Path(model_dir).resolve().name + (f"-{dtype}" if dtype else "")
        server = uvicorn_server(create_app(engine, name, defaults=defaults, config=config), config)
        host, port = sock.getsockname()[:2]
        # uvicorn announces the address only for sockets it bound itself
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        logging.getLogger("uvicorn.error").info("orl serve: model id %r; API %s/v1 ; live page %s/ (docs/SERVING.md)",
                                                name, url, url)
        server.run(sockets=[sock])
    finally:
        sock.close()
