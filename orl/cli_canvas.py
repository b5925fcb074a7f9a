"""`orl generate` on a DiffusionGemma checkpoint: dlmrt's canvas mode (orl.engine.canvas)."""
from __future__ import annotations

import argparse


def generate_canvas(args: argparse.Namespace, model, tok, manifest: dict, decode: dict) -> int:
    """Decoding settings: generation_config.json (its diffusion keys and EOS ids), then transformers'
    defaults; of the decode flags given (decode: DecodeConfig names), --max-new-tokens (default 64),
    --steps-per-block (> 0: max_denoising_steps), --entropy-bound and --chunk-steps (default 1) apply,
    with --seed; any other is refused by name (orl.engine.canvas_defaults.canvas_settings)."""
    from orl.engine import DecodeConfig
    from orl.engine.canvas_defaults import canvas_decoder, canvas_settings

    settings = {"max_new_tokens": DecodeConfig.max_new_tokens, "chunk_steps": DecodeConfig.chunk_steps,
                **canvas_settings(decode, args.model)}  # generate's defaults are DecodeConfig's
    decoder, cfg = canvas_decoder(args.model, model, tok, manifest, seed=args.seed, **settings)
    gen = decoder.generate(args.prompt, cfg)[0]
    print(args.prompt + gen.text, flush=True)
    stop = "EOS" if gen.finished else "max_new_tokens"
    print(f"tokens: {gen.n_tokens}  forwards: {gen.forwards} ({gen.step_forwards} denoise + {gen.commit_forwards} "
          f"encode)  TPF: {gen.tpf:.2f}  tokens/s: {gen.tokens_per_s:.1f}  stop: {stop}  "
          f"[diffusion_gemma canvas {decoder.canvas}, <= {cfg.max_denoising_steps} steps]")
    return 0
