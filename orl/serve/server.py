"""`orl serve`: load a checkpoint, warm the engine up, run the HTTP server."""
from __future__ import annotations

from pathlib import Path

import torch

from orl.engine import DecodeConfig, Engine
from orl.serve.app import create_app


def defaults_from_manifest(manifest: dict) -> DecodeConfig:
    """The block length and residual mode a checkpoint was trained for are the server's defaults."""
    return DecodeConfig(block_len=manifest.get("block_len") or DecodeConfig.block_len,
                        residual=manifest.get("residual_mode") or "off")


def warm_up(engine: Engine, cfg: DecodeConfig) -> None:
    """One short decode before the first request: allocates the static buffers of the default shape and
    runs every kernel once. Two blocks where the context allows, so the commit forward runs too. The
    prompt is a single EOS token because it exists in every vocabulary."""
    n_blocks = 2 if 1 + 2 * cfg.block_len <= engine.max_len else 1
    engine.generate_ids([[engine.eos_id]], DecodeConfig(**{**cfg.to_dict(), "max_new_tokens": n_blocks * cfg.block_len}))


def serve(model_dir: str, *, host: str = "127.0.0.1", port: int = 8000, queue_size: int = 64,
          timeout_s: float = 600.0, device: str | None = None) -> None:
    import uvicorn

    from orl.checkpoint import load_checkpoint, require_objective

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    model, tokenizer, manifest = load_checkpoint(model_dir, device=device)
    require_objective(manifest, "block_diffusion", model_dir)
    engine = Engine(model, tokenizer)
    defaults = defaults_from_manifest(manifest)
    warm_up(engine, defaults)
    app = create_app(engine, Path(model_dir).resolve().name, defaults=defaults, queue_size=queue_size,
                     timeout_s=timeout_s)
    uvicorn.run(app, host=host, port=port, log_level="info")
