"""`orl serve`: check the settings, bind the port, load a checkpoint, warm the engine up, run the HTTP
server. Everything a user can get wrong on the command line (port, timeouts, device, a port in use)
is refused with a ValueError naming it before the model is loaded; the CLI prints it in one line."""
from __future__ import annotations

import dataclasses
import logging
import socket

from orl.device import resolve_device
from orl.engine import DecodeConfig, Engine
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.ar_step import SELF_DRAFTS
from orl.engine.canvas import CanvasConfig, CanvasDecoder
from orl.serve.app import create_app
from orl.serve.config import ServerConfig
from orl.serve.connection import timed_protocol


def warm_up(engine: Engine | CanvasDecoder | ARDecoder, cfg: DecodeConfig | CanvasConfig | ARConfig) -> None:
    """One short decode before the first request: allocates the static buffers of the default shape and
    runs every kernel once. Two blocks where the context allows, so the commit forward runs too. The
    prompt is a single EOS token because it exists in every vocabulary."""
    if isinstance(engine, ARDecoder):  # a few rounds: a speculative decoder's verify (and fused groups) run too
        engine.generate_ids([[engine.eos_id]], dataclasses.replace(cfg, max_new_tokens=min(
            cfg.max_new_tokens, 2 * (cfg.spec_tokens + 1), engine.max_len - 1), stop=()))
        return
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


def decoder_for(model_dir: str, model, tokenizer, manifest: dict, ar: ARConfig | None):
    """-> (decoder, its defaults) for a loaded checkpoint. ar: the AR decoder's settings from the command line
    (speculative decoding), for an autoregressive checkpoint, or for a block-diffusion one drafting for its own
    AR path (spec_draft 'diffusion' | 'fused'); refused by name for any other."""
    from orl.checkpoint import require_objective

    objective = manifest.get("objective")
    # a config.json without orl.json is a causal LM unless its family reader says it is a dLLM (as orl generate)
    causal = objective == ARDecoder.objective or (manifest.get("source") == "config.json" and objective is None)
    if ar is not None and not causal and (ar.spec_draft not in SELF_DRAFTS or objective == CanvasDecoder.objective):
        raise ValueError(f"--spec-tokens / --spec-draft / --spec-ngram: only for autoregressive checkpoints, or "
                         f"--spec-draft diffusion | fused on a block-diffusion one ({model_dir} is "
                         f"{objective or 'a block-diffusion model'})")
    if causal or ar is not None:
        return ARDecoder(model, tokenizer, manifest=manifest), (ar or ARConfig())
    if objective == CanvasDecoder.objective:  # DiffusionGemma: generation_config.json's defaults
        from orl.engine.canvas_defaults import canvas_decoder

        return canvas_decoder(model_dir, model, tokenizer, manifest)
    require_objective(manifest, Engine.objective, model_dir)
    # the block length and residual mode it was trained for
    return Engine(model, tokenizer, manifest=manifest), DecodeConfig.from_manifest(manifest)


def serve(model_dir: str, config: ServerConfig | None = None, *, device: str | None = None,
          dtype: str | None = None, ar: ARConfig | None = None, spec_verifier: str | None = None,
          draft_vocab: str | None = None) -> None:
    """dtype: cast the weights at load (as `orl generate` / `orl eval --dtype`); the served model id is
    then '<dir name>-<dtype>', as eval records name a cast model. ar: serve with the AR decoder
    (decoder_for). spec_verifier: the checkpoint that verifies a self-speculative decode's drafts (default: the
    one a draft-only conversion records; orl.verifier); draft_vocab: a draft vocabulary file for its drafts."""
    from pathlib import Path

    from orl.checkpoint import load_checkpoint
    from orl.model.families.common import dtype_from_name
    from orl.verifier import attach_self_draft, check_self_draft_flags, verifier_dir

    config = (config or ServerConfig()).validate()
    ar = ar.validate() if ar is not None else None
    dev = resolve_device(device)
    cast = dtype_from_name(dtype) if dtype else None  # an unknown name fails before the port and the load
    check_self_draft_flags(spec_verifier, draft_vocab, ar.spec_draft if ar else None)
    sock = bind(config.host, config.port)
    try:
        model, tokenizer, manifest = load_checkpoint(model_dir, device=dev, dtype=cast)
        model = attach_self_draft(model, manifest, model_dir, tokenizer, spec_verifier, draft_vocab,
                                  ar.spec_draft if ar else None, dev, cast)
        engine, defaults = decoder_for(model_dir, model, tokenizer, manifest, ar)
        warm_up(engine, defaults)  # its decode checks the settings: a self-draft the checkpoint cannot make fails here
        name = Path(model_dir).resolve().name + (f"-{dtype}" if dtype else "")
        if (v := verifier_dir(manifest, spec_verifier)) is not None:  # the answers are the verifier's tokens
            name += f"+{Path(v).resolve().name}"
        server = uvicorn_server(create_app(engine, name, defaults=defaults, config=config), config)
        host, port = sock.getsockname()[:2]
        # uvicorn announces the address only for sockets it bound itself
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        log = logging.getLogger("uvicorn.error")
        if isinstance(engine, Engine):
            log.info("orl serve: model id %r; API %s/v1 ; live page %s/ (docs/SERVING.md)", name, url, url)
        else:  # the page shows denoising steps, which canvas and AR decoding do not stream
            log.info("orl serve: model id %r; API %s/v1 ; no live page for the %s decoder (docs/SERVING.md)", name,
                     url, "canvas" if isinstance(engine, CanvasDecoder) else "autoregressive")
        server.run(sockets=[sock])
    finally:
        sock.close()
