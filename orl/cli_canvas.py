"""`orl generate` on a DiffusionGemma checkpoint: dlmrt's canvas mode (orl.engine.canvas)."""
from __future__ import annotations

import argparse


def generate_canvas(args: argparse.Namespace, model, tok, manifest: dict) -> int:
    """Decoding settings: generation_config.json (its diffusion keys and EOS ids), then transformers'
    defaults; of the flags, only --max-new-tokens, --seed, --chunk-steps and --steps-per-block
    (> 0: max_denoising_steps) apply."""
    from orl.engine import DecodeConfig
    from orl.engine.canvas_defaults import canvas_decoder

    def given(value, default):  # generate's default when a flag was not given (DecodeConfig's)
        return default if value is None else value

    decoder, cfg = canvas_decoder(args.model, model, tok, manifest,
                                  max_new_tokens=given(args.max_new_tokens, DecodeConfig.max_new_tokens),
                                  seed=args.seed, chunk_steps=given(args.chunk_steps, DecodeConfig.chunk_steps),
                                  max_denoising_steps=args.steps_per_block or None)
    gen = decoder.generate(args.prompt, cfg)[0]
    print(args.prompt + gen.text, flush=True)
    stop = "EOS" if gen.finished else "max_new_tokens"
    print(f"tokens: {gen.n_tokens}  forwards: {gen.forwards} ({gen.step_forwards} denoise + {gen.commit_forwards} "
          f"encode)  TPF: {gen.tpf:.2f}  tokens/s: {gen.tokens_per_s:.1f}  stop: {stop}  "
          f"[diffusion_gemma canvas {decoder.canvas}, <= {cfg.max_denoising_steps} steps]")
    return 0
