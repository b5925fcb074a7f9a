"""`orl generate` on a DiffusionGemma checkpoint: dlmrt's canvas mode (orl.engine.canvas)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def generation_config(directory) -> dict:
    """The checkpoint's generation_config.json (transformers writes one beside config.json), or {}."""
    path = Path(directory) / "generation_config.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object")
    return data


def generate_canvas(args: argparse.Namespace, model, tok, manifest: dict) -> int:
    """Decoding settings: generation_config.json (its diffusion keys and EOS ids), then transformers'
    defaults; of the flags, only --max-new-tokens, --seed, --chunk-steps and --steps-per-block
    (> 0: max_denoising_steps) apply."""
    from orl.engine.canvas import CanvasConfig, CanvasDecoder

    from orl.model.families.common import token_ids

    gen_cfg = generation_config(args.model)
    cfg = CanvasConfig.from_generation_config(
        gen_cfg, max_new_tokens=args.max_new_tokens, seed=args.seed,
        chunk_steps=args.chunk_steps, max_denoising_steps=args.steps_per_block or None)
    if token_ids(gen_cfg.get("eos_token_id")):  # what transformers' generate() would stop at
        manifest = {**manifest, "eos_ids": token_ids(gen_cfg["eos_token_id"])}
    decoder = CanvasDecoder(model, tok, manifest=manifest)
    gen = decoder.generate(args.prompt, cfg)[0]
    print(args.prompt + gen.text, flush=True)
    stop = "EOS" if gen.finished else "max_new_tokens"
    print(f"tokens: {gen.n_tokens}  forwards: {gen.forwards} ({gen.step_forwards} denoise + {gen.commit_forwards} "
          f"encode)  TPF: {gen.tpf:.2f}  tokens/s: {gen.tokens_per_s:.1f}  stop: {stop}  "
          f"[diffusion_gemma canvas {decoder.canvas}, <= {cfg.max_denoising_steps} steps]")
    return 0
