"""`orl eval`: run the engine over task samples for each commit threshold and append one record per
(sample, draw) to a JSONL file (orl.eval.records), resuming where an interrupted run stopped.

Timing: each threshold's run starts with one untimed warm-up generate on a full batch; every batch is
padded to the same size (repeating its last prompt, extra rows discarded) so buffers and captured
graphs keep one shape, and records state the batch size. Per-row timings with batch size > 1 include
the other rows' work; use --batch-size 1 when latency and tokens/s matter.
Seeds: each row's sampling seed depends only on (decode seed, prompt id, draw), never on its batch, so
a resumed run draws what an uninterrupted one would.
"""
from __future__ import annotations

import dataclasses
import hashlib
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from orl.engine import DecodeConfig, Engine, Generation
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.ar_step import SELF_DRAFTS
from orl.engine.canvas import CanvasConfig, CanvasDecoder
from orl.engine.stops import with_stop
from orl.eval import metrics
from orl.eval.humaneval import HumanEval
from orl.eval.records import (RecordWriter, check_out, code_identity, config_id, decoder_label, model_identity,
                              read_records, record_key)
from orl.eval.tasks import Sample, get_task, make_samples, task_names, trained_tasks
from orl.model.families.common import DTYPES

PROMPT_STYLES = ("auto", "base", "chat")
# draws per task: the samples (0.4 ms, 260 bytes each for `add`) and the todo list are built before the first
# generation, so --limit 10**12 never started and grew without bound; a million is far past any run here
MAX_DRAWS = 1_000_000
AR_ONLY = ("spec_tokens", "spec_ngram", "spec_draft", "spec_groups")  # EvalSpec.ar: speculative decoding (orl.engine.speculative)


@dataclass
class EvalSpec:
    model: str
    out: str
    # "trained": the families the checkpoint records training on (else "all"); "all": every synthetic family
    tasks: list[str] = field(default_factory=lambda: ["trained"])
    split: str = "heldout"
    limit: int = 100                     # samples per task
    thresholds: list[float] | None = None   # None: [0.9] (a canvas decoder has no threshold)
    decode: dict = field(default_factory=dict)   # DecodeConfig.from_manifest overrides (block_len, residual: the manifest's)
    ar: dict = field(default_factory=dict)       # ARConfig settings DecodeConfig lacks (spec_*): AR, or self-draft
    batch_size: int = 16
    n_samples: int = 1                   # draws per prompt (pass@k; use temperature > 0)
    seed: int = 0                        # sample selection and decode seed
    device: str = "cpu"
    prompt_style: str = "auto"           # humaneval: chat if the tokenizer has a chat template
    dtype: str | None = None             # cast the weights at load (None: the file's dtype)
    spec_verifier: str | None = None     # self-draft: the checkpoint verifying the drafts (orl.verifier; None:
                                         # the one a draft-only conversion records, if any)
    draft_vocab: str | None = None       # self-draft: a draft vocabulary file (orl.model.draft_vocab)
    progress: bool = True

    def validate(self) -> "EvalSpec":
        problems = []
        if self.limit <= 0 or self.batch_size <= 0 or self.n_samples <= 0:
            problems.append(f"limit, batch_size and n_samples must be > 0, got {self.limit}, {self.batch_size}, {self.n_samples}")
        elif self.limit * self.n_samples > MAX_DRAWS:
            problems.append(f"limit x n_samples must be <= {MAX_DRAWS:,} per task (every draw is listed before the "
                            f"first generation), got {self.limit} x {self.n_samples}")
        if self.thresholds is not None and not self.thresholds:
            problems.append("give at least one threshold")
        if self.prompt_style not in PROMPT_STYLES:
            problems.append(f"unknown prompt style {self.prompt_style!r}; expected one of {PROMPT_STYLES}")
        if self.dtype is not None and self.dtype not in DTYPES:
            problems.append(f"unknown dtype {self.dtype!r}; expected one of {sorted(DTYPES)}")
        if unknown := set(self.decode) - {f.name for f in dataclasses.fields(DecodeConfig)}:
            problems.append(f"unknown decode settings {sorted(unknown)}")
        if unknown := set(self.ar) - set(AR_ONLY):
            problems.append(f"unknown autoregressive settings {sorted(unknown)}; expected some of {AR_ONLY}")
        try:
            check_out(self.out)  # before the model loads
        except ValueError as e:
            problems.append(str(e))
        from orl.verifier import check_self_draft_flags

        try:
            check_self_draft_flags(self.spec_verifier, self.draft_vocab, self.ar.get("spec_draft"))
        except ValueError as e:
            problems.append(str(e))
        if problems:
            raise ValueError("invalid eval settings: " + "; ".join(problems))
        return self


def _tasks(spec: EvalSpec, tokenizer, manifest: dict | None = None) -> dict[str, object]:
    """"trained" expands to what `manifest` records (orl.eval.tasks.trained_tasks: a tasks-v7 model scored on the v6
    families would read 0% with no word of why), "all" to every synthetic family."""
    expand = {"all": task_names, "trained": lambda: list(trained_tasks(manifest or {}))}
    names = [n for name in spec.tasks for n in (expand[name]() if name in expand else [name])]
    out: dict[str, object] = {}
    for name in dict.fromkeys(names):
        if name == HumanEval.name:
            chat = spec.prompt_style == "chat" or (spec.prompt_style == "auto" and bool(getattr(tokenizer, "chat_template", None)))
            out[name] = HumanEval(tokenizer, chat)
        else:
            out[name] = get_task(name)
    return out


def _samples(name: str, task, spec: EvalSpec) -> list[Sample]:
    if isinstance(task, HumanEval):
        return [task.sample(spec.split, i) for i in range(min(spec.limit, len(task)))]
    if hasattr(task, "count"):  # a data file (tasks/datafile.py): its rows of the split, each once
        n = task.count(spec.split) or 1  # an empty split: sample() says how to fill it
        return [task.sample(spec.split, i) for i in range(min(spec.limit, n))]
    return make_samples(name, spec.split, spec.limit, spec.seed)


def warn_long_answers(samples: list[Sample], tokenizer, max_new_tokens: int) -> None:
    """A reference answer longer than the answer budget cannot be written in full: its prompt scores 0 whatever the
    model knows (beyond-range answers, `--split beyond`, often are). Said once per task, on stderr."""
    long: dict[str, list[int]] = {}
    bos = getattr(tokenizer, "bos_id", None) is not None  # encode puts it first; an answer does not carry it
    for s in samples:
        try:
            n = len(tokenizer.encode(s.answer)) - bos if s.answer else 0
        except ValueError:  # a character the vocabulary lacks: the task's own problem, reported where it is decoded
            continue
        if n >= max_new_tokens:  # + EOS
            long.setdefault(s.task, []).append(n)
    for task, lens in long.items():
        n = sum(1 for s in samples if s.task == task)
        print(f"orl eval: warning: {len(lens)} of {n} {task} reference answers need {max(lens) + 1} tokens with EOS, "
              f"more than --max-new-tokens {max_new_tokens}: they cannot be answered in full", file=sys.stderr)


def check_same_prompts(out, existing: list[dict], samples: list[Sample]) -> None:
    """A rerun resumes by prompt id (task/split/index): records stored under an id for another prompt (an edited
    --tasks-file, a changed task module) would be kept as this prompt's answer and the new prompt never run."""
    stored = {r["prompt_id"]: r.get("prompt") for r in existing}
    for s in samples:
        if (old := stored.get(prompt_id(s))) is not None and old != s.prompt:
            raise ValueError(f"{out}: its records hold prompt id {prompt_id(s)} for the prompt {old!r}, but this "
                             f"run's prompt of that id is {s.prompt!r} (a changed tasks file or task module?); "
                             "write these records to a new --out")


def prompt_id(s: Sample) -> str:
    return f"{s.task}/{s.split}/{s.index}"


def row_seed(seed: int, pid: str, draw: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}|{pid}|{draw}".encode(), digest_size=4).digest(), "big") >> 1


def _record(s: Sample, draw: int, g: Generation, verdict: bool, decode: dict, batch: int, ident: dict) -> dict:
    return {
        "prompt_id": prompt_id(s), "task": s.task, "split": s.split, "index": s.index, "sample": draw,
        "prompt": s.prompt, "answer": s.answer, "output_ids": g.token_ids, "output_text": g.text,
        "finished": g.finished, "stop": g.stop, "verdict": verdict,
        "forwards": {"prefill": g.prefill_forwards, "step": g.step_forwards, "commit": g.commit_forwards},
        # tpf None: a sample of no forward of its own (Fast-dLLM v2's one-token answer, read off the prefill)
        "n_tokens": g.n_tokens,
        "tpf": metrics.tpf(g.n_tokens, g.step_forwards, g.commit_forwards) if g.forwards else None,
        "block_steps": g.block_steps,
        "timing": {"total_s": g.total_s, "prefill_s": g.prefill_s,
                   "tokens_per_s": metrics.tokens_per_s(g.n_tokens, g.total_s)},
        "batch_size": batch, "decode": decode, **ident,
    }


def run_eval(spec: EvalSpec, on_batch: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Evaluate and return this spec's records (earlier ones from the file included). on_batch sees
    each batch's new records after they are written."""
    from orl.checkpoint import load_checkpoint, require_objective
    from orl.verifier import attach_self_draft, verifier_dir

    spec.validate()
    model, tokenizer, manifest = load_checkpoint(spec.model, device=spec.device,
                                                 dtype=DTYPES[spec.dtype] if spec.dtype else None)
    model = attach_self_draft(model, manifest, spec.model, tokenizer, spec.spec_verifier, spec.draft_vocab,
                              spec.ar.get("spec_draft"), spec.device, DTYPES[spec.dtype] if spec.dtype else None)
    objective = manifest.get("objective") or Engine.objective
    # a block-diffusion checkpoint drafting for its own AR path (orl.engine.self_draft) decodes as an AR model
    self_draft = spec.ar.get("spec_draft") in SELF_DRAFTS and objective == Engine.objective
    if spec.ar and objective != ARDecoder.objective and not self_draft:
        raise ValueError(f"{', '.join(sorted(spec.ar))}: only for autoregressive checkpoints, or --spec-draft "
                         f"diffusion | fused on a block-diffusion one ({spec.model} is {objective})")
    unused = (["thresholds"] if spec.thresholds else []) + sorted(set(spec.decode) - {"max_new_tokens",
                                                                                     "temperature", "stop"})
    if self_draft and unused:
        raise ValueError(f"{', '.join(unused)}: not used with --spec-draft {spec.ar['spec_draft']} (the AR path "
                         "decodes, its drafts are greedy); it takes max_new_tokens, temperature, stop, spec_tokens, "
                         "spec_groups")
    # the AR decoder has no blocks or rule: such settings would be dropped and the records read as theirs. A
    # threshold sweep may name it beside block models (one AR point, its records' threshold None, so none is misread)
    ar_only = [k for k in unused if k not in ("chunk_steps", "compile", "thresholds")]
    if objective == ARDecoder.objective and ar_only:
        raise ValueError(f"{', '.join(ar_only)}: not used by the autoregressive decoder ({spec.model} is an "
                         "autoregressive model); it takes max_new_tokens, temperature, stop, chunk_steps, compile, "
                         "spec_tokens, spec_ngram")
    if objective == CanvasDecoder.objective:  # DiffusionGemma: no mask token, no threshold
        engine, configs = _canvas(spec, model, tokenizer, manifest)
    elif objective == ARDecoder.objective or self_draft:
        # An AR peer is judged by its own decoder: greedy (or sampled) next-token decoding, no threshold.
        engine = ARDecoder(model, tokenizer, manifest=manifest)
        speed = {k: spec.decode[k] for k in ("chunk_steps", "compile") if k in spec.decode}  # plain AR only (above)
        configs = [ARConfig(max_new_tokens=spec.decode.get("max_new_tokens", DecodeConfig.max_new_tokens),
                            temperature=spec.decode.get("temperature", 0.0), seed=spec.seed,
                            stop=spec.decode.get("stop", ()), **speed, **spec.ar).validate()]
    else:
        require_objective(manifest, Engine.objective, spec.model)
        engine = Engine(model, tokenizer, manifest=manifest)
        settings = {"seed": spec.seed, **spec.decode}
        configs = [DecodeConfig.from_manifest(manifest, **{**settings, "threshold": t}).validate()
                   for t in spec.thresholds or [0.9]]
    if spec.n_samples > 1 and not any(c.draws for c in configs):  # the seed decides nothing: N copies of one answer
        raise ValueError(f"n_samples {spec.n_samples}: this decoder is deterministic (greedy), so every draw of a "
                         "prompt is the same answer and pass@k would be pass@1; sample with temperature > 0 "
                         "(--temperature), or use n_samples 1")
    tasks = _tasks(spec, tokenizer, manifest)
    samples = [s for name, task in tasks.items() for s in _samples(name, task, spec)]
    warn_long_answers(samples, tokenizer, min(c.max_new_tokens for c in configs))
    model_id = model_identity(spec.model)
    if spec.dtype:  # a cast model is another model: its records must not resume the file dtype's
        model_id["id"] += f"-{spec.dtype}"
    if (where := verifier_dir(manifest, spec.spec_verifier)) is not None:  # another verifier: other tokens
        model_id["verifier"] = model_identity(where)
        model_id["id"] += f"+{model_id['verifier']['id']}"
    if spec.draft_vocab:  # the same tokens, other forwards: records of another TPF
        digest = hashlib.sha256(Path(spec.draft_vocab).read_bytes()).hexdigest()[:16]
        model_id["draft_vocab"] = {"path": str(Path(spec.draft_vocab).resolve()), "sha256_16": digest}
        model_id["id"] += f"+dv{digest}"
    ident = {"model": model_id, "code": code_identity(),
             "device": torch.cuda.get_device_name() if engine.device.type == "cuda" else platform.processor() or "cpu"}
    by_stop: dict[tuple[str, ...], list[Sample]] = {}  # a task's own stop strings (k-shot: the newline)
    for s in samples:
        by_stop.setdefault(tuple(tasks[s.task].stop), []).append(s)
    keys = set()
    with RecordWriter(spec.out) as writer:
        existing = read_records(spec.out) if Path(spec.out).exists() else []  # (the writer repaired a cut last line)
        check_same_prompts(spec.out, existing, samples)
        done = {record_key(r) for r in existing}
        for cfg, group in ((with_stop(c, stop), g) for c in configs for stop, g in by_stop.items()):
            decode = decode_dict(cfg, engine)
            cid = config_id(decode, spec.batch_size)
            keys |= {(model_id["id"], cid, prompt_id(s), k) for s in group for k in range(spec.n_samples)}
            todo = [(s, k) for s in group for k in range(spec.n_samples)
                    if (model_id["id"], cid, prompt_id(s), k) not in done]
            if not todo:
                continue
            _batch_generate(engine, todo[: spec.batch_size], cfg, spec.batch_size)  # warm-up, untimed
            desc = f"eval {decoder_label(decode)} tau={getattr(cfg, 'threshold', '-')}"
            bar = tqdm(total=len(todo), desc=desc, disable=not spec.progress, unit="sample")
            for i in range(0, len(todo), spec.batch_size):
                chunk = todo[i: i + spec.batch_size]
                gens = _batch_generate(engine, chunk, cfg, spec.batch_size)
                recs = [_record(s, k, g, tasks[s.task].verify(s.prompt, g.text), decode, spec.batch_size,
                                {"config_id": cid, **ident}) for (s, k), g in zip(chunk, gens)]
                writer.write(recs)
                done |= {record_key(r) for r in recs}  # a config given twice (--thresholds 0.9,0.9) runs once
                bar.update(len(chunk))
                if on_batch is not None:
                    on_batch(recs)
            bar.close()
    return [r for r in read_records(spec.out) if record_key(r) in keys]


def _canvas(spec: EvalSpec, model, tokenizer, manifest: dict) -> tuple[CanvasDecoder, list[CanvasConfig]]:
    """The canvas decoder and its one config (generation_config.json, then the settings that apply);
    a setting it has no use for is refused by name, not ignored."""
    from orl.engine.canvas_defaults import canvas_decoder, canvas_settings

    settings = canvas_settings(spec.decode, spec.model,
                               ("--threshold / --thresholds",) if spec.thresholds is not None else ())
    decoder, cfg = canvas_decoder(spec.model, model, tokenizer, manifest, seed=spec.seed, **settings)
    return decoder, [cfg]


def decode_dict(cfg: DecodeConfig | ARConfig | CanvasConfig, engine=None) -> dict:
    """A record's decoder settings; an AR decoder is the degenerate block decoder (block 1, no threshold),
    a canvas decoder one without threshold over blocks of its canvas length (engine: the decoder)."""
    if isinstance(cfg, CanvasConfig):
        return {"rule": "canvas", "block_len": engine.canvas, "residual": "off", "threshold": None, **cfg.to_dict()}
    if isinstance(cfg, ARConfig):
        return {"rule": "ar", "block_len": 1, "residual": "off", "threshold": None, **cfg.to_dict()}
    return cfg.to_dict()


def _batch_generate(engine: Engine | ARDecoder | CanvasDecoder, chunk: list[tuple[Sample, int]],
                    cfg: DecodeConfig | ARConfig | CanvasConfig, batch: int) -> list[Generation]:
    rows = chunk + [chunk[-1]] * (batch - len(chunk))
    seeds = [row_seed(cfg.seed, prompt_id(s), k) for s, k in rows]
    return engine.generate([s.prompt for s, _ in rows], cfg, seeds=seeds)[: len(chunk)]
