"""`orl bench`: one command, one run, one table. Every available system decodes the same held-out
prompts at batch 1 and greedy, with the same max_new_tokens:

  (a) the base dLLM in dlmrt (threshold rule, residual off)          -- the reference of every ratio
  (b) the dLLM after ORL in dlmrt (residual mode and block length from its manifest)   --orl
  (c) the LLaDA-reference loop and (d) the prefix-cache loop on the base dLLM (orl.eval.peers)
  (e) an AR model in orl's AR decoder (orl.engine.ar)                                 --ar
  (f) the same AR model through transformers' generate, when it exports to Qwen3 (orl.export)
  (g) (e) with prompt-lookup speculative decoding (orl.engine.speculative)          --ar-spec-tokens K
  (h) (f) with transformers' prompt-lookup decoding (prompt_lookup_num_tokens=K)
  (i) the base dLLM decoding self-speculatively: its diffusion path drafts K, its AR path verifies
      (orl.engine.self_draft, two forwards a round)                                 --self-spec-tokens K
  (j) (i) fused: each verify forward also drafts the next round (one forward a round)
  (k) (j) with only the G likeliest draft groups a round (a shorter forward)             --self-spec-groups G
  (l) a draft-only checkpoint drafting for the verifier its recipe records, as (k) decodes   --drafter DIR
      (e.g. the AR model: its greedy tokens, at the drafter's acceptance)

Per system: tokens/s mean and median over prompts (batch 1), TPF as a ratio of sums (all tokens incl.
EOS / all forwards) and without the EOS tokens, latency p50 / p90, accuracy in % (the task verifiers),
all from orl.eval.metrics.summarize over per-prompt records; then the ratios of tokens/s, TPF and p50
latency to (a)'s, taken within this run. Notes under the table say which rows are peers and why a
plain loop can be as fast as dlmrt on a CPU. Timing: one untimed warm-up generate per system
(torch.compile happens there), then the systems take turns prompt by prompt, so drift on a shared
machine hits all of them alike. The table is appended to --out as markdown, so runs accumulate (a .md
file; checked before the run).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from orl.engine import DecodeConfig, Engine
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.config import UnsupportedSetting
from orl.engine.self_draft import check_self_draft
from orl.eval import metrics
from orl.eval.bench_spec import BenchSpec, Output, System, drafter_problem
from orl.eval.bench_table import COLUMNS, LABELS, format_table  # noqa: F401 (COLUMNS, LABELS: the table's, re-exported)
from orl.eval.peers import hf_generate, llada_reference, prefix_cache
from orl.eval.runner import EvalSpec, _samples, _tasks, prompt_id
from orl.export import export_hf, not_exportable


def _dlmrt(directory: str, spec: BenchSpec, residual: str | None) -> tuple[System, Engine, DecodeConfig]:
    engine = Engine.from_checkpoint(directory, device=spec.device)
    cfg = DecodeConfig.from_manifest(engine.manifest, max_new_tokens=spec.max_new_tokens, threshold=spec.threshold,
                                     residual=residual, chunk_steps=spec.chunk_steps, compile=spec.compile).validate()

    def run(prompt: str) -> Output:
        g = engine.generate(prompt, cfg)[0]
        return Output(g.token_ids, g.text, g.forwards, g.total_s, g.finished)
    return run, engine, cfg


def _loops(engine: Engine, cfg: DecodeConfig, spec: BenchSpec) -> tuple[System | str, System | str]:
    """(c) and (d) on the base in its layout, or why not: (c), LLaDA's schedule over prompt blocks, runs only in
    that layout; (d) in the block layouts."""
    n_blocks = cfg.n_blocks
    steps = spec.ref_steps or n_blocks * cfg.block_len
    if steps % n_blocks:
        raise ValueError(f"ref_steps ({steps}) must be a multiple of the number of blocks ({n_blocks})")
    tok = engine.tokenizer
    common = dict(gen_len=cfg.max_new_tokens, block_len=cfg.block_len, mask_id=engine.mask_id,
                  eos_id=engine.eos_id, banned=engine.ids.banned)

    def wrap(loop, **kw) -> System:
        def run(prompt: str) -> Output:
            r = loop(engine.model, tok.encode(prompt), **common, **kw)
            return Output(r.token_ids, tok.decode(r.token_ids), r.forwards, r.total_s,
                          r.token_ids[-1:] == [engine.eos_id])
        return run
    # in another layout than the base's their blocks would not be the base's: another decoder's tokens
    c = (wrap(llada_reference, steps=steps) if cfg.layout == "prompt_block" else
         f"n/a: the LLaDA-reference loop decodes prompt blocks; this base decodes in layout {cfg.layout}")
    d = (wrap(prefix_cache, threshold=spec.threshold, layout=cfg.layout) if cfg.layout != "full_sequence" else
         "n/a: the prefix-cache loop decodes blocks on a KV cache; this base decodes in layout full_sequence")
    return c, d


def _ar(spec: BenchSpec) -> dict[str, System | str]:
    """(e), (f), (g), (h): one AR checkpoint in orl's decoder and in transformers', each plain and with
    prompt-lookup speculative decoding; a string says why a system is not in this run."""
    dec = ARDecoder.from_checkpoint(spec.ar, device=spec.device)
    plain = ARConfig(max_new_tokens=spec.max_new_tokens, chunk_steps=spec.ar_chunk_steps, compile=spec.compile)
    lookup = (spec.ar_spec_tokens, spec.ar_spec_ngram) if spec.ar_spec_tokens else None

    def ours(cfg: ARConfig) -> System:
        def run(prompt: str) -> Output:
            g = dec.generate(prompt, cfg)[0]
            return Output(g.token_ids, g.text, g.forwards, g.total_s, g.finished)
        return run

    off = "n/a: --ar-spec-tokens 0"
    systems: dict[str, System | str] = {"e": ours(plain), "g": ours(ARConfig(
        max_new_tokens=spec.max_new_tokens, spec_tokens=spec.ar_spec_tokens, spec_ngram=spec.ar_spec_ngram))
        if lookup else off}
    if reason := not_exportable(dec.model.args):
        # orl export still writes it, with orl's own modeling_orl.py: not transformers' code, so not this peer
        why = f"n/a: no plain transformers model ({reason}; `orl export` writes one with orl's own modeling code)"
        return {**systems, "f": why, "h": why}
    try:
        from transformers import AutoModelForCausalLM
    except ImportError:
        return {**systems, "f": "n/a: transformers is not installed", "h": "n/a: transformers is not installed"}
    with tempfile.TemporaryDirectory() as d:
        hf = AutoModelForCausalLM.from_pretrained(export_hf(dec.model, dec.tokenizer, Path(d) / "hf"))
    hf = hf.to(spec.device).eval()
    tok = dec.tokenizer

    def theirs(prompt_lookup: tuple[int, int] | None) -> System:
        def run(prompt: str) -> Output:
            r = hf_generate(hf, tok.encode(prompt), max_new_tokens=spec.max_new_tokens, eos_id=dec.eos_id,
                            pad_id=dec.pad_id, prompt_lookup=prompt_lookup)
            return Output(r.token_ids, tok.decode(r.token_ids), r.forwards, r.total_s,
                          r.token_ids[-1:] == [dec.eos_id])
        return run
    return {**systems, "f": theirs(None), "h": theirs(lookup) if lookup else off}


def _self_spec(engine: Engine, spec: BenchSpec) -> dict[str, System | str]:
    """(i), (j), (k): the base checkpoint in orl's AR decoder, drafting with its own diffusion path."""
    if not spec.self_spec_tokens:
        return dict.fromkeys("ijk", "n/a: --self-spec-tokens 0")
    try:
        check_self_draft(engine.model, engine.mask_id, engine.manifest.get("objective"))
    except UnsupportedSetting as e:
        return dict.fromkeys("ijk", f"n/a: the base cannot draft for itself ({e})")

    def run(cfg: ARConfig) -> System:
        dec = ARDecoder(engine.model, engine.tokenizer, manifest=engine.manifest)  # its own buffers per system

        def go(prompt: str) -> Output:
            g = dec.generate(prompt, cfg)[0]
            return Output(g.token_ids, g.text, g.forwards, g.total_s, g.finished)
        return go
    def cfg(draft: str, groups: int = 0) -> ARConfig:
        return ARConfig(max_new_tokens=spec.max_new_tokens, spec_tokens=spec.self_spec_tokens, spec_draft=draft,
                        spec_groups=groups).validate()
    k = ("n/a: --self-spec-groups 0" if not spec.self_spec_groups else
         f"n/a: --self-spec-groups {spec.self_spec_groups} carries every group (2K + 1 = "
         f"{2 * spec.self_spec_tokens + 1}): (j)" if spec.self_spec_groups > 2 * spec.self_spec_tokens else
         run(cfg("fused", spec.self_spec_groups)))
    return {"i": run(cfg("diffusion")), "j": run(cfg("fused")), "k": k}


def _drafter(spec: BenchSpec) -> System | str:
    """(l): a draft-only checkpoint's drafts verified by the model its recipe records (orl.verifier): that
    model's greedy tokens at the drafter's acceptance, fused with (k)'s groups (all of them for G = 0)."""
    from orl.verifier import drafter_decoder

    if not spec.drafter:
        return "n/a: no --drafter given"
    if bad := drafter_problem(spec):
        raise ValueError(bad)
    dec = drafter_decoder(spec.drafter, device=spec.device)
    groups = spec.self_spec_groups if spec.self_spec_groups <= 2 * spec.self_spec_tokens else 0
    cfg = ARConfig(max_new_tokens=spec.max_new_tokens, spec_tokens=spec.self_spec_tokens, spec_draft="fused",
                   spec_groups=groups).validate()

    def go(prompt: str) -> Output:
        g = dec.generate(prompt, cfg)[0]
        return Output(g.token_ids, g.text, g.forwards, g.total_s, g.finished)
    return go


def build_systems(spec: BenchSpec) -> tuple[dict[str, System | str], Engine, DecodeConfig]:
    """key -> system, or the reason it is not in this run; plus (a)'s engine and config."""
    a, engine, cfg = _dlmrt(spec.base, spec, residual="off")
    systems: dict[str, System | str] = {"a": a}
    systems["b"] = _dlmrt(spec.orl, spec, None)[0] if spec.orl else "n/a: no --orl given"
    systems["c"], systems["d"] = _loops(engine, cfg, spec)
    systems.update(_ar(spec) if spec.ar else dict.fromkeys("efgh", "n/a: no --ar given"))
    systems.update(_self_spec(engine, spec))
    systems["l"] = _drafter(spec)
    return systems, engine, cfg


def run_bench(spec: BenchSpec) -> tuple[dict[str, dict], str]:
    """-> (summary row per system key, with ratios to (a) under "vs_a"; the markdown table)."""
    spec.validate()
    systems, engine, cfg = build_systems(spec)
    evspec = EvalSpec(model=spec.base, out="", tasks=spec.tasks, split=spec.split, limit=spec.limit, seed=spec.seed)
    tasks = _tasks(evspec, engine.tokenizer, engine.manifest)
    samples = [s for name, task in tasks.items() for s in _samples(name, task, evspec)]
    live = {k: s for k, s in systems.items() if callable(s)}
    for system in live.values():
        system(samples[0].prompt)  # warm-up, untimed
    records = []
    for s in samples:
        for key, system in live.items():
            o = system(s.prompt)
            n = len(o.token_ids)
            records.append({"system": key, "prompt_id": prompt_id(s), "verdict": tasks[s.task].verify(s.prompt, o.text),
                            "n_tokens": n, "finished": o.finished, "forwards": {"step": o.forwards, "commit": 0},
                            "tpf": metrics.tpf(n, o.forwards, 0), "block_steps": [], "batch_size": 1,
                            "timing": {"total_s": o.total_s, "tokens_per_s": metrics.tokens_per_s(n, o.total_s)}})
    rows = {r["system"]: r for r in metrics.summarize(records, ["system"])}
    ref = rows["a"]
    for r in rows.values():
        r["vs_a"] = {"tokens_per_s": r["tokens_per_s"] / ref["tokens_per_s"], "tpf": r["tpf"] / ref["tpf"],
                     "latency_p50_s": r["latency_p50_s"] / ref["latency_p50_s"]}
    table = format_table(spec, cfg, rows, systems, len(samples))
    if spec.out:
        Path(spec.out).parent.mkdir(parents=True, exist_ok=True)
        with open(spec.out, "a") as f:
            f.write(table + "\n")
    return rows, table
