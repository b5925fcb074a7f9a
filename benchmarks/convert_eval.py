"""The converted model against its AR original, side by side on the same held-out text (issue 22 item 3).

    python benchmarks/convert_eval.py --ar ~/.cache/orl/gemma-3-270m --dlm runs/gemma-convert \
        --corpus ~/.cache/orl/corpus/<key> --windows 32 --context 64 --free-tokens 32 --out results.json

Held-out windows come from the corpus's held-out code stream (files the run never trained on), evenly
spaced, each starting with BOS as training rows do. Measured:
  next block   the true prefix (`context` tokens) given, the next B tokens predicted: the AR original
               greedily one by one (orl.engine.ar.ARDecoder), the converted model as one block under
               the engine (threshold rule, in the layout the manifest records: orl.json `layout`, else
               prompt_block; --layout overrides); exact match of the whole block and per-token accuracy
               against the text, and the two models' block agreement.
  free running greedy continuations of `free_tokens` from the same prefixes: per-position agreement
               with the AR original's and the mean length of the agreed prefix.
  TPF          tokens / (denoising + commit forwards), a ratio of sums over all continuations
               (orl.eval.metrics.pooled_tpf); the AR decoder's is 1 by definition.
  tokens/s     batch 1, one prompt at a time, generated tokens / wall seconds summed over prompts,
               prefill included, for both decoders on the same threads; also per CPU second of the
               process (on a shared machine one thread's wall time is mostly waiting for a core).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orl.engine import DecodeConfig, Engine  # noqa: E402
from orl.engine.ar import ARConfig, ARDecoder  # noqa: E402
from orl.eval.metrics import pooled_tpf  # noqa: E402
from orl.train.corpus import fixed_windows, with_bos  # noqa: E402


UNTRAINED = "untrained"


def held_out_rows(stream: torch.Tensor, n: int, length: int, bos: int | None) -> list[list[int]]:
    return with_bos(fixed_windows(stream, n, length), bos).tolist()


def padded(ids: list[int], n: int, eos: int) -> list[int]:
    """A generation cut at EOS, filled with EOS to n tokens (what the text would need to match)."""
    return (ids + [eos] * n)[:n]


def threshold_decoder(dlm: Engine, block: int, threshold: float, layout: str):
    """The converted model decoding in blocks (threshold rule): (prefixes, n new tokens) -> generations."""
    return lambda prefixes, n: dlm.generate_ids(prefixes, DecodeConfig(block_len=block, max_new_tokens=n,
                                                                       threshold=threshold, layout=layout))


def self_spec_decoder(dec: ARDecoder, k: int, draft: str, groups: int = 0):
    """The converted model's AR path verifying drafts of its diffusion path (orl.engine.self_draft): exactly the
    AR path's greedy tokens, TPF = tokens / all forwards (drafts included). Batch 1, so one prefix at a time.
    groups: ARConfig.spec_groups (fused: the likeliest groups only, a shorter forward)."""
    def cfg(n: int) -> ARConfig:
        kn = min(k, max(n - 1, 1))
        return ARConfig(max_new_tokens=n, spec_tokens=kn, spec_draft=draft, spec_groups=min(groups, 2 * kn))
    return lambda prefixes, n: [dec.generate_ids([p], cfg(n))[0] for p in prefixes]


def next_block(ar: ARDecoder, decode, rows: list[list[int]], context: int, block: int, eos: int,
               batch: int = 8) -> dict:
    prefixes, truth = [r[:context] for r in rows], [r[context:context + block] for r in rows]
    ar_out, dlm_out, recs = [], [], []
    for k in range(0, len(rows), batch):
        part = prefixes[k:k + batch]
        ar_out += [padded(g.token_ids, block, eos) for g in ar.generate_ids(part, ARConfig(max_new_tokens=block))]
        gens = decode(part, block)
        dlm_out += [padded(g.token_ids, block, eos) for g in gens]
        recs += [record(g) for g in gens]

    def scores(pred):
        return {"block_exact": sum(p == t for p, t in zip(pred, truth)) / len(truth),
                "token_acc": sum(a == b for p, t in zip(pred, truth) for a, b in zip(p, t)) / (len(truth) * block)}

    agree = sum(a == d for a, d in zip(ar_out, dlm_out)) / len(rows)
    return {"n": len(rows), "block": block, "context": context, "ar": scores(ar_out), "dlm": scores(dlm_out),
            "dlm_block_agrees_with_ar": agree, "dlm_tpf": pooled_tpf(recs)["tpf"]}


def record(g) -> dict:
    return {"n_tokens": g.n_tokens, "finished": g.finished, "forwards": {"step": g.step_forwards,
                                                                           "commit": g.commit_forwards}}


def free_running(ar: ARDecoder, decode, prefixes: list[list[int]], n: int, eos: int) -> dict:
    """Batch-1 continuations of each prefix by both decoders: agreement, TPF, tokens/s."""
    agree_pos, agree_prefix, recs = 0, 0, []
    ar_tok = ar_s = dlm_tok = dlm_s = ar_cpu = dlm_cpu = 0.0
    for p in prefixes:  # alternating, so that a shared machine's load falls on both alike
        t, c = time.perf_counter(), time.process_time()
        a = ar.generate_ids([p], ARConfig(max_new_tokens=n))[0]
        ar_s, ar_cpu = ar_s + time.perf_counter() - t, ar_cpu + time.process_time() - c
        t, c = time.perf_counter(), time.process_time()
        d = decode([p], n)[0]
        dlm_s, dlm_cpu = dlm_s + time.perf_counter() - t, dlm_cpu + time.process_time() - c
        ar_tok, dlm_tok = ar_tok + a.n_tokens, dlm_tok + d.n_tokens
        recs.append(record(d))
        x, y = padded(a.token_ids, n, eos), padded(d.token_ids, n, eos)
        same = [i == j for i, j in zip(x, y)]
        agree_pos += sum(same)
        agree_prefix += same.index(False) if False in same else n
    k = len(prefixes)
    return {"n": k, "new_tokens": n, "position_agreement": agree_pos / (k * n), "mean_agreed_prefix": agree_prefix / k,
            "dlm_tpf": pooled_tpf(recs)["tpf"], "ar_tok_s": ar_tok / ar_s, "dlm_tok_s": dlm_tok / dlm_s,
            "speedup": (dlm_tok / dlm_s) / (ar_tok / ar_s),
            # tokens per CPU second of this process: with one thread, what a dedicated core would give
            "ar_tok_cpu_s": ar_tok / ar_cpu, "dlm_tok_cpu_s": dlm_tok / dlm_cpu,
            "speedup_cpu": (dlm_tok / dlm_cpu) / (ar_tok / ar_cpu),
            # per prompt, in order: two decoders' TPFs compared prompt by prompt (a paired test), not only pooled
            "per_prompt": [{"tokens": r["n_tokens"], "forwards": r["forwards"]["step"] + r["forwards"]["commit"]}
                           for r in recs]}


def evaluate(ar_dir: str, dlm_dir: str, stream: torch.Tensor, windows: int, context: int, block: int | None,
             threshold: float, free_tokens: int, free_prompts: int, layout: str | None = None,
             device: str = "cpu") -> dict:
    return evaluate_thresholds(ar_dir, dlm_dir, stream, windows, context, block, (threshold,), free_tokens,
                               free_prompts, layout, device)[0]


SPEC_DRAFTS = ("fused", "diffusion")


def evaluate_thresholds(ar_dir: str, dlm_dir: str, stream: torch.Tensor, windows: int, context: int,
                        block: int | None, thresholds: tuple[float, ...], free_tokens: int, free_prompts: int,
                        layout: str | None = None, device: str = "cpu", spec: int = 0,
                        spec_draft: str = "fused", on_result=None, spec_verifier: str = "own",
                        draft_rank: int = 0, spec_groups: int = 0, draft_ids: torch.Tensor | None = None,
                        free_offset: int = 0) -> list[dict]:
    """One result per threshold, the two checkpoints loaded once (a GPU lease spends seconds per load); with
    spec = k > 0 one more: the converted model's AR path verifying its own diffusion drafts of k tokens
    (spec_draft: "fused", one forward a round, or "diffusion", a draft forward and a verify forward), whose
    tokens are that AR path's greedy ones - what a conversion that kept the AR path (--set ar_aux=W) gives.
    spec_verifier "ar": the AR original's weights score the verify rows instead (orl.model.row_split), so the
    tokens are the original's greedy ones exactly and the converted weights only draft; draft_rank r > 0: as the
    original plus a rank-r delta on the draft rows (orl.model.draft_delta: one weight read a forward).
    free_offset: the free-running prompts are windows free_offset.. (0: the first free_prompts).
    spec_groups: the fused decoder's draft groups a round (0: all); draft_ids: the draft rows score only these
    tokens (orl.model.draft_vocab; the verify rows the whole vocabulary, so the tokens do not change).
    on_result(results so far) runs after each decoder's result (main writes --out there: a run cut off by a
    deadline keeps what it measured)."""
    from orl.checkpoint import load_checkpoint, recorded_verifier

    ar_model, tok, ar_manifest = load_checkpoint(ar_dir, device=device)
    if dlm_dir == UNTRAINED:  # the conversion's starting point: the AR weights with the shifted read-out
        from orl.train.convert import to_diffusion

        dlm_model, dtok, manifest = to_diffusion(ar_model).eval(), tok, {}
    else:
        dlm_model, dtok, manifest = load_checkpoint(dlm_dir, device=device)
    if recorded_verifier(manifest) and (thresholds or spec_verifier != "ar"):  # orl.train.draft_only
        raise ValueError(f"{dlm_dir} is a draft-only conversion (its clean rows never trained): measure it only as "
                         "a drafter for the AR original: --thresholds none --spec K --spec-verifier ar")
    want = recorded_verifier(manifest).get("base_files_sha256")
    if want:  # the AR original given must be the verifier the drafter trained against
        from orl.train.convert_base import base_digest

        if base_digest(ar_dir, ar_manifest) != want:
            raise ValueError(f"--ar {ar_dir} is not the verifier {dlm_dir} was trained against (orl.json "
                             "recipe.verifier.base_files_sha256)")
    block = block or manifest.get("block_len") or 4
    layout = layout or manifest.get("layout") or "prompt_block"
    # caches sized to the requests, not the model's context (32k for Gemma: GiBs per row)
    max_len = context + max(block, free_tokens) + 2 * block
    ar = ARDecoder(ar_model, tok, max_len=max_len)
    dlm = Engine(dlm_model, dtok, max_len=max_len) if thresholds else None  # the threshold rows' decoder
    rows = held_out_rows(stream, windows, context + block, getattr(tok, "bos_id", None))
    results = []
    decoders = [(t, threshold_decoder(dlm, block, t, layout)) for t in thresholds]
    delta = None  # draft_rank: what the truncated SVD kept
    if spec < 0:
        raise ValueError(f"--spec must be >= 0 (drafted tokens per round; 0: off), got {spec}")
    if spec:
        if spec_draft not in SPEC_DRAFTS:
            raise ValueError(f"--spec-draft {spec_draft!r}: choose one of {', '.join(SPEC_DRAFTS)}")
        from orl.engine.self_draft import scratch_slots

        if spec_verifier not in ("own", "ar"):
            raise ValueError(f"--spec-verifier {spec_verifier!r}: 'own' or 'ar'")
        spec_model = dlm_model
        if spec_verifier == "ar":
            import copy

            from orl.model.row_split import verify_with

            # a copy when the threshold rows still need the converted model whole (one more set of weights)
            spec_model = verify_with(copy.deepcopy(dlm_model) if thresholds else dlm_model, ar_model)
            if draft_rank:
                from orl.model.draft_delta import low_rank_drafts

                delta = low_rank_drafts(spec_model, draft_rank)
        elif draft_rank:
            raise ValueError("--draft-rank is for --spec-verifier ar (a delta from the AR original)")
        if draft_ids is not None:
            from orl.model.draft_vocab import draft_vocab

            spec_model = draft_vocab(spec_model, draft_ids)
        # spec_groups is the fused decoder's: the scratch it needs is sized by it (fewer groups, fewer slots)
        spec_len = max_len + scratch_slots(spec, max(block, free_tokens), spec_groups)
        dec = ARDecoder(spec_model, dtok, manifest=manifest, max_len=spec_len)
        # refused now (no mask token, no shifted read-out), not after the threshold rows have run
        kb = min(spec, max(block - 1, 1))
        dec.check(ARConfig(max_new_tokens=block, spec_tokens=kb, spec_draft=spec_draft,
                           spec_groups=min(spec_groups, 2 * kb)))
        decoders.append((None, self_spec_decoder(dec, spec, spec_draft, spec_groups)))
    elif spec_groups or draft_ids is not None:
        raise ValueError("--spec-groups / --draft-vocab are for the --spec decoder")
    spec_label = (f"self-spec {spec_draft} k={spec}" + (" verifier=ar" if spec_verifier == "ar" else "")
                  + (f" rank={draft_rank}" if draft_rank else "") + (f" groups={spec_groups}" if spec_groups else "")
                  # read off the model: the size the draft rows really score
                  + (f" vocab={spec_model.lm_head.ids.numel()}" if draft_ids is not None else ""))
    for threshold, decode in decoders:
        out = {"ar": ar_dir, "dlm": dlm_dir, "dlm_recipe_step": (manifest.get("recipe") or {}).get("step"),
               "threshold": threshold, "decoder": "threshold" if threshold is not None else spec_label,
               "layout": layout, "threads": torch.get_num_threads(), "device": device, "next_block": None,
               **({"draft_delta": delta} if threshold is None and delta else {})}
        try:
            out["next_block"] = next_block(ar, decode, rows, context, block, tok.eos_id)
            out["free_running"] = free_running(ar, decode, [r[:context] for r in
                                                            rows[free_offset:free_offset + free_prompts]], free_tokens,
                                               tok.eos_id)
        except (RuntimeError, ValueError) as e:  # out of device memory, say: the other rows still count
            if threshold is not None:
                raise
            out.update(error=f"{type(e).__name__}: {e}", free_running=None)
            results.append(out)
            if on_result:
                on_result(results)
            continue
        if torch.device(device).type != "cpu":  # host CPU seconds say nothing of a GPU's work
            out["free_running"].update(ar_tok_cpu_s=None, dlm_tok_cpu_s=None, speedup_cpu=None)
        results.append(out)
        if on_result:
            on_result(results)
    return results


def emit(res: dict, out: str | None) -> None:
    """Print the result as indented JSON, and write it to `out` too when given."""
    text = json.dumps(res, indent=1)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ar", required=True, help="the AR original's checkpoint")
    ap.add_argument("--dlm", required=True, help=f"the converted checkpoint, or {UNTRAINED!r}: the AR weights "
                    "with the shifted read-out, before any conversion training")
    ap.add_argument("--corpus", required=True, help="the corpus directory (tokens.safetensors: code_heldout)")
    ap.add_argument("--stream", default="code_heldout", help="the corpus stream the windows and prompts come from "
                    "(default code_heldout, the files no run trained on; code_train to choose a decoding setting "
                    "without looking at the held-out split)")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--block", type=int, help="default: the converted model's block_len")
    ap.add_argument("--threshold", type=float, default=0.9)
    ap.add_argument("--thresholds", help="comma-separated thresholds, one load: --out then holds a list of "
                    "results; 'none': only the --spec decoder")
    ap.add_argument("--layout", choices=("prompt_block", "absolute_grid"),
                    help="the engine's block layout; default: the checkpoint's orl.json, else prompt_block")
    ap.add_argument("--free-offset", type=int, default=0, help="free-running prompts from window N on (default 0: "
                    "the first --free-prompts windows); e.g. the later windows as fresh prompts")
    ap.add_argument("--free-tokens", type=int, default=32)
    ap.add_argument("--free-prompts", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu | cuda (per-CPU-second figures only on cpu)")
    ap.add_argument("--spec", type=int, default=0, help="also decode with the converted model's AR path verifying "
                    "its own diffusion drafts of K tokens (self-speculative; exactly the AR path's tokens)")
    ap.add_argument("--spec-draft", default="fused", choices=SPEC_DRAFTS)
    ap.add_argument("--spec-verifier", default="own", choices=("own", "ar"), help="whose weights verify the "
                    "drafts: the converted model's own AR path, or the AR original's (orl.model.row_split: "
                    "exactly the original's tokens)")
    ap.add_argument("--draft-rank", type=int, default=0, help="with --spec-verifier ar: the drafts from the original "
                    "plus a rank-R truncated SVD of the converted weights' difference (orl.model.draft_delta)")
    ap.add_argument("--spec-groups", type=int, default=0, help="--spec-draft fused: the likeliest G draft groups a "
                    "round (default 0: all 2K + 1); a shorter forward, the same tokens")
    ap.add_argument("--draft-vocab", type=int, default=0, help="the draft rows score only the N most frequent "
                    "tokens of the corpus's training streams (orl.model.draft_vocab; the same tokens, cheaper drafts)")
    ap.add_argument("--out", help="write the JSON here too")
    args = ap.parse_args()
    from safetensors.torch import load_file

    torch.set_num_threads(args.threads)
    streams = load_file(Path(args.corpus) / "tokens.safetensors")
    if args.stream not in streams:
        ap.error(f"--stream {args.stream}: the corpus has {', '.join(sorted(streams))}")
    stream = streams[args.stream]
    draft_ids = None
    if args.draft_vocab:  # as `orl draft-vocab` chooses them: the training streams (code_train among them), never
        # the held-out split
        from orl.checkpoint import read_tokenizer
        from orl.model.draft_vocab import corpus_draft_ids

        draft_ids = corpus_draft_ids(streams, read_tokenizer(args.dlm if args.dlm != UNTRAINED else args.ar),
                                     args.draft_vocab)
    taus = (() if args.thresholds == "none" else tuple(float(t) for t in args.thresholds.split(","))
            if args.thresholds else (args.threshold,))
    if args.free_offset < 0 or args.free_offset + args.free_prompts > args.windows:
        ap.error(f"--free-offset {args.free_offset} + --free-prompts {args.free_prompts} must lie within --windows "
                 f"{args.windows}")
    if not taus and not args.spec:
        ap.error("--thresholds none leaves nothing to measure without --spec")
    many = bool(args.thresholds or args.spec)
    # every result names its windows' stream (a setting chosen on code_train must not read as a held-out figure),
    # the partial ones too (a run cut off leaves them)
    def stamped(rs):
        return [dict(r, stream=args.stream, free_offset=args.free_offset) for r in rs]

    partial = (lambda rs: Path(args.out).write_text(json.dumps(stamped(rs), indent=1) + "\n")) if args.out and many \
        else None
    res = evaluate_thresholds(args.ar, args.dlm, stream, args.windows, args.context, args.block, taus,
                              args.free_tokens, args.free_prompts, args.layout, args.device, args.spec,
                              args.spec_draft, on_result=partial, spec_verifier=args.spec_verifier,
                              draft_rank=args.draft_rank, spec_groups=args.spec_groups, draft_ids=draft_ids,
                              free_offset=args.free_offset)
    res = stamped(res)
    emit(res if many else res[0], args.out)


if __name__ == "__main__":
    main()
