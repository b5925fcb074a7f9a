"""`orl quantize`: a checkpoint's weights as int8, FP8 or NVFP4 (orl.quant), written as a new checkpoint
that every orl command loads (the manifest's `quantization` field says how)."""
from __future__ import annotations

import argparse
from pathlib import Path

# orl.quant.KINDS, spelled out so that building the parser does not import torch (a test keeps them equal)
KINDS = ("int8", "fp8", "nvfp4")
# what the quantized checkpoint does not take from its source manifest, besides what save_checkpoint derives from
# the model (orl.checkpoint.DERIVED): the source's own file record. Every other field says how the model decodes
# (block_len, layout, sub_block_len, eos_ids, mask_token, objective, ...; a published dLLM's come from its family's
# config reader) and a quantized copy decodes as its source does: a list of fields to keep would drop the ones
# added later (layout once fell back to the engine's prompt_block default that way)
NOT_CARRIED = ("files", "git_commit", "source")


def quantize_checkpoint(model_dir: str, kind: str, out: str):
    """Load `model_dir`, quantize it to `kind` and save it to `out` -> (path, orl.quant.weight_bytes before, after)."""
    from orl.atomic_dir import check_apart
    from orl.checkpoint import DERIVED, load_checkpoint, read_manifest, recorded_verifier, save_checkpoint
    from orl.quant import KINDS, QuantizationError, quantize, weight_bytes

    if kind not in KINDS:  # before loading anything
        raise QuantizationError(f"unknown quantization {kind!r}; expected one of {', '.join(KINDS)}")
    # --out == --model passed check_replaceable (orl wrote it) and replaced the full-precision weights
    check_apart(Path(out), Path(model_dir), "--model")
    if drafts_for := recorded_verifier(read_manifest(model_dir)).get("base"):
        # its split forward needs the drafter's and the verifier's units alike (orl.model.row_split): a quantized
        # drafter beside its full-precision verifier could never decode
        raise QuantizationError(f"{model_dir} is a draft-only checkpoint (it drafts for {drafts_for}); it decodes "
                                "only beside that verifier's full-precision weights, so it is not quantized alone")
    model, tokenizer, manifest = load_checkpoint(model_dir)
    if manifest.get("quantization") is not None:
        raise QuantizationError(f"{model_dir} is already quantized ({manifest['quantization']['kind']}); "
                                "quantize the full-precision checkpoint")
    before = weight_bytes(model)
    quantize(model, kind)
    keep = {k: v for k, v in manifest.items() if k not in (*DERIVED, *NOT_CARRIED)}
    keep["quantized_from"] = {"path": str(model_dir), "git_commit": manifest.get("git_commit"),
                              "files": manifest.get("files")}
    path = save_checkpoint(model, tokenizer, out, manifest=keep)
    return path, before, weight_bytes(model)


def cmd_quantize(args: argparse.Namespace) -> int:
    path, before, after = quantize_checkpoint(args.model, args.kind, args.out)
    mib = 2**20
    print(path)
    print(f"{args.kind}: weights {before['total'] / mib:.2f} MiB -> {after['total'] / mib:.2f} MiB (quantized layers "
          f"{(before['total'] - after['other']) / mib:.2f} -> {after['quantized'] / mib:.2f} MiB; "
          f"{after['other'] / mib:.2f} MiB kept in the model dtype)")
    return 0


def add_commands(sub) -> None:
    s = sub.add_parser("quantize", help="write a checkpoint's weights as int8, fp8 or nvfp4 (a new checkpoint)")
    s.add_argument("--model", required=True, help="full-precision checkpoint directory")
    s.add_argument("--kind", required=True, choices=KINDS,
                   help="weight format (embeddings, lm_head and MoE routers stay in the model dtype)")
    s.add_argument("--out", required=True,
                   help="output directory (refused if it holds files orl did not write, "
                        "or is, holds or lies inside --model)")
    s.set_defaults(func=cmd_quantize)
