"""`orl generate`: decode one prompt with the decoder the checkpoint's objective calls for (dlmrt's block
engine, the AR decoder, or DiffusionGemma's canvas mode) and print the text and a speed summary."""
from __future__ import annotations

import argparse
import sys

from orl.cli_decode import add_decode_flags, add_self_draft_flags, decode_overrides, refuse_ar_flags
from orl.cli_models import COMPILE_NOTE


def add_command(sub) -> None:
    s = sub.add_parser("generate", help="decode one prompt with dlmrt and print the text and a speed summary")
    s.add_argument("prompt", help="prompt text")
    s.add_argument("--model", required=True, help="checkpoint directory")
    add_decode_flags(s)
    add_self_draft_flags(s)
    s.add_argument("--dtype", default=None, help="cast the weights at load: float32 | bfloat16 | float16 (default: the file's)")
    s.add_argument("--seed", type=int, default=0, help="sampling seed")
    s.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    s.add_argument("--show-steps", action="store_true",
                   help="print every denoising step: '_' masked, [x] committed by that step")
    s.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    from orl.checkpoint import load_checkpoint
    from orl.cli_format import format_step
    from orl.cli_models import generate_autoregressive
    from orl.device import resolve_device
    from orl.engine import DecodeConfig, DoneEvent, Engine, StepEvent
    from orl.engine.ar_step import SELF_DRAFTS
    from orl.model.families.common import dtype_from_name
    from orl.verifier import attach_self_draft, check_self_draft_flags

    decode = decode_overrides(args)
    flags = {**decode, "seed": args.seed}  # a flag not given: the checkpoint's or DecodeConfig's
    # bad flags fail before the weights load; a named cache is checked against the checkpoint's layout later
    early = {"layout": "full_sequence"} if args.full_sequence_cache not in (None, "none") or args.alg_temp else {}
    if args.block_len is None and (args.small_block_size or 0) > 0:  # it divides the checkpoint's block: checked later
        early["block_len"] = args.small_block_size
    DecodeConfig.from_manifest(early, **flags).validate()
    check_self_draft_flags(args.spec_verifier, args.draft_vocab, args.spec_draft)
    dtype = dtype_from_name(args.dtype) if args.dtype else None  # an unknown name fails before loading too
    model, tok, manifest = load_checkpoint(args.model, device=resolve_device(args.device), dtype=dtype)  # orl.json, once
    model = attach_self_draft(model, manifest, args.model, tok, args.spec_verifier, args.draft_vocab,
                              args.spec_draft, resolve_device(args.device), dtype)
    if manifest.get("objective") == "diffusion_gemma":  # no mask token: dlmrt's canvas mode
        from orl.cli_canvas import generate_canvas

        refuse_ar_flags(args, "a diffusion_gemma model")

        return generate_canvas(args, model, tok, manifest, decode)  # refuses the flags it has no use for
    # a config.json without orl.json is a causal LM unless its family reader says it is a dLLM (objective)
    plain_causal = manifest.get("source") == "config.json" and manifest.get("objective") is None
    # --spec-draft diffusion: a block-diffusion checkpoint drafts for its own AR path (orl.engine.self_draft)
    if manifest.get("objective") == "autoregressive" or plain_causal or args.spec_draft in SELF_DRAFTS:
        if plain_causal:
            print(f"note: {args.model} has no orl.json: a plain causal LM, not a diffusion model; "
                  "decoding it with the autoregressive decoder", file=sys.stderr)
        return generate_autoregressive(args, model, tok, manifest)
    refuse_ar_flags(args, "a block-diffusion model")
    engine = Engine(model, tok, manifest=manifest)
    cfg = DecodeConfig.from_manifest(engine.manifest, **flags)  # validated by the engine with the request
    color = sys.stdout.isatty()
    gen = None
    for event in engine.stream(args.prompt, cfg, steps=args.show_steps):
        if isinstance(event, StepEvent):
            r = event.record
            line = format_step(engine.tokenizer, r, event.n_valid, cfg.eos_fill, color, event.start)
            print(f"block {r.block} step {r.step + 1}: {line}  (+{int(r.committed.sum())})", flush=True)
        elif isinstance(event, DoneEvent):
            gen = event.generations[0]
    print(gen.text, flush=True)  # before the note on stderr
    if not gen.text.strip() and ((manifest.get("recipe") or {}).get("config") or {}).get("tasks"):
        print("note: this model answers the prompts of the tasks it was trained on; `orl tasks` shows their "
              "formats, with an example to type", file=sys.stderr)
    stop = f"stop string {gen.stop!r}" if gen.stop else "EOS" if gen.finished else "max_new_tokens"
    print(f"tokens: {gen.n_tokens}  forwards: {gen.forwards} ({gen.step_forwards} denoise + "
          f"{gen.commit_forwards} commit)  TPF: {gen.tpf:.2f}  tokens/s: {gen.tokens_per_s:.1f}  "
          f"stop: {stop}  [{cfg.rule}, block {cfg.block_len}, residual {cfg.residual}]")
    if args.compile:  # one decode: its time is mostly the compilation, so its tokens/s says nothing of the speed
        print(COMPILE_NOTE, file=sys.stderr)
    return 0
