"""The decode flags of `orl generate` and `orl eval` (DecodeConfig's knobs), defined once so that both
commands name and explain them alike. Every flag defaults to None: the checkpoint's default, else
DecodeConfig's, applies (DecodeConfig.from_manifest skips None), and a command can tell a flag that
was given from one that was not (a decoder with no use for a flag refuses it by name)."""
from __future__ import annotations

import argparse

RULES_HELP = ("commit rule: threshold (default) | topk | factor | entropy | dream | dream_origin | sdar_static | "
              "sdar_dynamic | llada21 | fast_dllm_v2")
CACHE_HELP = ("full_sequence layout (LLaDA, Dream): none (exact, default) | prefix | dual: Fast-dLLM v1's "
              "approximate caches (docs/MODELS.md)")
ALG_TEMP_HELP = ("rule dream, full_sequence layout: > 0 draws the positions to commit from softmax(confidence / "
                 "alg_temp) (Dream's alg_temp; 0: the most confident, default)")

# (flag, type (None: a switch), help); the DecodeConfig field is the flag's name with underscores
DECODE_FLAGS = (
    ("--rule", str, RULES_HELP),
    ("--confidence", str, "what the rule ranks by: prob (default) | sampled_prob | margin | neg_entropy | random"),
    ("--threshold", float, "commit threshold tau in (0, 1]: the threshold rule commits p_max >= tau (default 0.9)"),
    ("--steps-per-block", int, "topk rule: steps per block (0, default: one token per step); DiffusionGemma: "
                               "max denoising steps per canvas (0: the checkpoint's)"),
    ("--factor", float, "factor rule: f > 0 (default 1)"),
    ("--entropy-bound", float, "entropy rule: bound >= 0 (default 0.5); DiffusionGemma: its entropy bound "
                               "(default: the checkpoint's)"),
    ("--editing-threshold", float, "llada21 rule: re-edit p > this [0, 1] (0.9)"),
    ("--max-post-steps", int, "llada21 rule: edit-only steps after the last mask (16)"),
    ("--num-to-transfer", int, "llada21 rule: least mask commits per step (1)"),
    ("--small-block-size", int, "fast_dllm_v2 rule: sub-block length (default: the checkpoint's, else the "
                                "largest divisor of the block up to 8)"),
    ("--top-k", int, "sampling: the k most likely tokens only (0: off)"),
    ("--top-p", float, "sampling: the nucleus of mass p only, after top-k (1: off)"),
    ("--alg-temp", float, ALG_TEMP_HELP),
    ("--full-sequence-cache", str, CACHE_HELP),
    ("--block-len", int, "block length (default: the checkpoint's, else 16)"),
    ("--max-new-tokens", int, "at most this many generated tokens (default 64; DiffusionGemma under orl eval: "
                              "its generation_config.json's)"),
    ("--residual", str, "residual mode: off | rcd | adapter (default: the checkpoint's, else off)"),
    ("--temperature", float, "0: greedy (default); > 0: sampling"),
    ("--chunk-steps", int, "denoising steps between two host checks (default 1)"),
    ("--stop", "append", "stop string (repeatable, at most 16): the output ends before its first one; \\n and \\t "
                         "are read as newline and tab (default: none; k-shot eval tasks: the newline)"),
    ("--compile", None, "torch.compile the denoising step"),
    ("--cuda-graph", None, "replay the steps as CUDA graphs (GPU)"),
)
DECODE_FIELDS = tuple(flag[2:].replace("-", "_") for flag, _, _ in DECODE_FLAGS)
# ARConfig's knobs that DecodeConfig lacks: an autoregressive checkpoint takes them, and a block-diffusion one
# with --spec-draft diffusion (its AR path decodes); others refuse them
AR_FLAGS = (
    ("--spec-tokens", int, "speculative decoding, at most K drafted tokens verified per forward (0: off, default; "
                           "batch 1; the AR decoder's tokens): prompt lookup on an autoregressive checkpoint, or "
                           "with --spec-draft diffusion on a block-diffusion one"),
    ("--spec-ngram", int, "autoregressive checkpoints: the longest n-gram looked up for a draft (default 2)"),
    ("--spec-draft", str, "who drafts for --spec-tokens: lookup (default) | diffusion (a block-diffusion checkpoint's "
                          "own diffusion path, verified by its AR path: the AR path's tokens; orl.engine.self_draft) | "
                          "fused (diffusion, drafted inside the previous verify forward: one forward per round)"),
    ("--spec-groups", int, "--spec-draft fused: draft groups per round, the most likely by the draft's confidences "
                           "(default 0: all 2K + 1; fewer: a shorter forward, for a CPU or a large K)"),
)
AR_FIELDS = tuple(flag[2:].replace("-", "_") for flag, _, _ in AR_FLAGS)


def unescape(text: str) -> str:
    """A stop string as typed in a shell: "\\n" and "\\t" are a newline and a tab ("\\\\": a backslash)."""
    out, i = [], 0
    while i < len(text):
        pair = text[i:i + 2]
        if pair in ("\\n", "\\t", "\\\\"):
            out.append({"\\n": "\n", "\\t": "\t", "\\\\": "\\"}[pair])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def add_decode_flags(parser: argparse.ArgumentParser, flags=DECODE_FLAGS + AR_FLAGS) -> None:
    for flag, kind, text in flags:
        if kind is None:
            parser.add_argument(flag, action="store_true", default=None, help=text)
        elif kind == "append":
            parser.add_argument(flag, type=unescape, action="append", default=None, help=text)
        else:
            choices = ("lookup", "diffusion", "fused") if flag == "--spec-draft" else None
            parser.add_argument(flag, type=kind, default=None, choices=choices, help=text)


def add_self_draft_flags(parser: argparse.ArgumentParser) -> None:
    """--spec-verifier and --draft-vocab, for every command that decodes a checkpoint (generate, eval, serve)."""
    parser.add_argument("--spec-verifier", default=None, metavar="DIR",
                        help="with --spec-draft diffusion | fused: the checkpoint whose weights verify the drafts (the "
                             "AR original a conversion came from): its greedy tokens exactly (orl.model.row_split). "
                             "Default: the verifier a draft-only checkpoint records")
    parser.add_argument("--draft-vocab", default=None, metavar="FILE",
                        help="with --spec-draft diffusion | fused: the draft rows score only these tokens (a file "
                             "`orl draft-vocab` writes; orl.model.draft_vocab): cheaper drafts, the same tokens")


def decode_overrides(args: argparse.Namespace) -> dict:
    """The decode flags given, as DecodeConfig overrides (field name -> value)."""
    return {name: getattr(args, name) for name in DECODE_FIELDS if getattr(args, name) is not None}



def ar_overrides(args: argparse.Namespace) -> dict:
    """The AR-only flags given, as ARConfig overrides (field name -> value)."""
    return {name: getattr(args, name) for name in AR_FIELDS if getattr(args, name) is not None}


def refuse_ar_flags(args: argparse.Namespace, objective: str) -> None:
    """A decoder other than the AR one has no use for --spec-tokens / --spec-ngram / --spec-draft: refused by
    name (a block-diffusion checkpoint with --spec-draft diffusion never gets here: its AR path decodes)."""
    if given := ar_overrides(args):
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"{flags}: only for autoregressive checkpoints, or --spec-draft diffusion | fused on a "
                         f"block-diffusion one ({args.model} is {objective})")
