"""Offline training text for the AR -> block-diffusion conversion (issue 22 item 2): nothing is downloaded.

Three token streams, each documents packed back to back (every document is tok.encode(text), which
starts with BOS where the tokenizer wants one, then EOS), cut into windows by the recipe:
  code     Python source of the standard library and the installed packages. Files are deduplicated
           by content hash and split into train / held-out by that hash, so the split is a pure
           function of the content (the same file is never on both sides, on any machine).
  tasks    the verifiable task families (orl.eval.tasks), prompt + answer rendered as plain text.
  distill  the AR model's own greedy continuations (orl.engine.ar.ARDecoder) of prompts from the code
           stream and the task suite: the model is its own teacher.
The streams are built once into `directory` (tokens.safetensors + corpus.json: every file used, its
content hash and split, and `files_sha256`, the hash of that list, which the run's manifest records).
"""
from __future__ import annotations

import hashlib
import json
import random
import sys
import sysconfig
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

STREAMS = ("code", "tasks", "distill")


@dataclass(frozen=True)
class CorpusConfig:
    roots: tuple[str, ...] = ()       # directories searched for .py files; empty: stdlib + site-packages
    heldout_frac: float = 0.05        # share of files (by content hash) held out
    max_file_bytes: int = 200_000     # larger files are mostly generated tables
    train_tokens: int = 4_000_000     # code tokens kept per split (files taken in hash order until reached)
    heldout_tokens: int = 200_000
    tasks: tuple[str, ...] = ()       # task families rendered as text; empty: none
    task_samples: int = 2000          # samples per family
    distill_prompts: int = 0          # AR continuations (half of code prompts, half of task prompts)
    distill_prompt_tokens: int = 48
    distill_new_tokens: int = 64

    def __post_init__(self):
        if not 0.0 < self.heldout_frac < 1.0:
            raise ValueError(f"invalid CorpusConfig: heldout_frac must be in (0, 1), got {self.heldout_frac}")
        for name in ("max_file_bytes", "train_tokens", "heldout_tokens", "distill_prompt_tokens", "distill_new_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"invalid CorpusConfig: {name} must be > 0, got {getattr(self, name)}")


def default_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(dict.fromkeys(p for p in (paths["stdlib"], paths["purelib"], paths["platlib"]) if Path(p).is_dir()))


def python_files(roots: tuple[str, ...], max_bytes: int) -> list[dict]:
    """Every readable UTF-8 .py file under `roots`, one per distinct content, sorted by content hash:
    [{"sha256", "path", "bytes"}]. Of duplicates the lexicographically first path is named."""
    seen: dict[str, dict] = {}
    for root in roots:
        for p in sorted(Path(root).rglob("*.py")):
            try:
                if not p.is_file() or p.stat().st_size > max_bytes:
                    continue
                data = p.read_bytes()
                data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if not data.strip():
                continue
            sha = hashlib.sha256(data).hexdigest()
            if sha not in seen or str(p) < seen[sha]["path"]:
                seen[sha] = {"sha256": sha, "path": str(p), "bytes": len(data)}
    return [seen[k] for k in sorted(seen)]


def split_of(sha: str, heldout_frac: float) -> str:
    return "heldout" if int(sha[:12], 16) / 16 ** 12 < heldout_frac else "train"


def list_hash(entries: list[dict]) -> str:
    return hashlib.sha256("".join(f"{e['sha256']} {e['split']}\n" for e in entries).encode()).hexdigest()


def code_streams(tok, cfg: CorpusConfig) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Files in hash order, each to the stream of its split until that split holds its budget."""
    budget = {"train": cfg.train_tokens, "heldout": cfg.heldout_tokens}
    ids: dict[str, list[int]] = {"train": [], "heldout": []}
    used = []
    for f in python_files(cfg.roots or default_roots(), cfg.max_file_bytes):
        split = split_of(f["sha256"], cfg.heldout_frac)
        if len(ids[split]) >= budget[split]:
            if all(len(ids[s]) >= budget[s] for s in ids):
                break
            continue
        doc = tok.encode(Path(f["path"]).read_text(encoding="utf-8")) + [tok.eos_id]
        ids[split].extend(doc)
        used.append({**f, "split": split, "tokens": len(doc)})
    return {f"code_{s}": torch.tensor(v, dtype=torch.int32) for s, v in ids.items()}, used


def task_stream(tok, names: tuple[str, ...], n: int, split: str = "train") -> torch.Tensor:
    from orl.eval.tasks import get_task

    ids: list[int] = []
    for name in names:
        task = get_task(name)
        for i in range(n):
            s = task.sample(split, i)
            ids += tok.encode(s.prompt + s.answer) + [tok.eos_id]
    return torch.tensor(ids, dtype=torch.int32)


@torch.no_grad()
def distill_stream(model, tok, code: torch.Tensor, cfg: CorpusConfig, seed: int = 0, batch: int = 8) -> torch.Tensor:
    """prompt + the AR model's greedy continuation (+ EOS when it stopped), for code windows and task
    prompts; prompts are drawn deterministically from `seed`."""
    from orl.engine.ar import ARConfig, ARDecoder
    from orl.eval.tasks import get_task

    rng = random.Random(f"distill|{seed}")
    bos = [tok.bos_id] if getattr(tok, "bos_id", None) is not None else []
    n_code = cfg.distill_prompts - cfg.distill_prompts // 2 if cfg.tasks else cfg.distill_prompts
    L = cfg.distill_prompt_tokens
    prompts = [bos + code[s:s + L].tolist() for s in (rng.randrange(len(code) - L) for _ in range(n_code))]
    for i in range(cfg.distill_prompts - n_code):
        prompts.append(tok.encode(get_task(cfg.tasks[i % len(cfg.tasks)]).sample("train", 10**6 + i).prompt))
    # a cache sized to the longest request, not the model's context (32k for Gemma: GiBs per row)
    dec, ids = ARDecoder(model, tok, max_len=max(map(len, prompts)) + cfg.distill_new_tokens), []
    for k in range(0, len(prompts), batch):
        part = prompts[k:k + batch]
        for p, g in zip(part, dec.generate_ids(part, ARConfig(max_new_tokens=cfg.distill_new_tokens))):
            ids += p + g.token_ids  # token_ids end with EOS when the model stopped
    return torch.tensor(ids, dtype=torch.int32)


def build_corpus(tok, cfg: CorpusConfig, directory: Path, model=None, seed: int = 0, log=print) -> dict[str, torch.Tensor]:
    """The streams, built into `directory` on first use and read back after (a distill stream needs
    `model`, the AR teacher). Returns {code_train, code_heldout, tasks, distill} (empty ones omitted)."""
    directory = Path(directory)
    try:
        return read_corpus(directory)
    except CorpusMissing:
        pass
    path = directory / "tokens.safetensors"
    log(f"building the conversion corpus in {directory} ...")
    streams, used = code_streams(tok, cfg)
    if min(len(streams["code_train"]), len(streams["code_heldout"])) == 0:
        raise ValueError(f"no Python source found for both splits under {cfg.roots or default_roots()}")
    if cfg.tasks:
        streams["tasks"] = task_stream(tok, cfg.tasks, cfg.task_samples)
    if cfg.distill_prompts:
        if model is None:
            raise ValueError("distill_prompts > 0 needs the AR model (the teacher)")
        streams["distill"] = distill_stream(model, tok, streams["code_train"], cfg, seed)
    manifest = {"config": asdict(cfg), "roots": list(cfg.roots or default_roots()), "files_sha256": list_hash(used),
                "n_files": {s: sum(f["split"] == s for f in used) for s in ("train", "heldout")},
                "tokens": {k: len(v) for k, v in streams.items()}, "python": sys.version.split()[0], "files": used}
    directory.mkdir(parents=True, exist_ok=True)
    # each file is written under a name of this build's own and renamed into place, so that two runs
    # building the same corpus at once (one key) both finish, and a reader never sees half a file;
    # the token file goes last: its presence means the corpus is complete
    tag = uuid.uuid4().hex
    for name, write in (("corpus.json", lambda p: p.write_text(json.dumps(manifest, indent=1) + "\n")),
                        (path.name, lambda p: save_file(streams, p))):
        tmp = directory / f".{name}.{tag}.tmp"
        write(tmp)
        tmp.replace(directory / name)
    return streams


class CorpusMissing(FileNotFoundError):
    pass


def read_corpus(directory: Path) -> dict[str, torch.Tensor]:
    """A corpus build_corpus finished (it writes tokens.safetensors last). Under torchrun rank 0 builds
    and the other ranks read: on several nodes `directory` must be one they all see."""
    directory = Path(directory)
    if not ((directory / "tokens.safetensors").exists() and (directory / "corpus.json").exists()):
        raise CorpusMissing(f"no finished corpus in {directory} (tokens.safetensors and corpus.json); with "
                            "several nodes, data_dir must be a directory every node sees")
    return load_file(directory / "tokens.safetensors")


def corpus_summary(directory: Path) -> dict:
    """What the run's manifest records: the hash of the file list, counts, tokens, and corpus.json's digest."""
    raw = (Path(directory) / "corpus.json").read_bytes()
    m = json.loads(raw)
    return {"dir": str(directory), "corpus_json_sha256": hashlib.sha256(raw).hexdigest(),
            **{k: m[k] for k in ("files_sha256", "n_files", "tokens", "python")}}


def corpus_key(cfg: CorpusConfig, tokenizer_digest: str, teacher_digest: str | None, seed: int) -> str:
    """Names the corpus directory: everything that decides its content."""
    blob = json.dumps([asdict(cfg), tokenizer_digest, teacher_digest if cfg.distill_prompts else None,
                       seed if cfg.distill_prompts else None], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def windows(stream: torch.Tensor, n: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """n random windows [n, length] of a stream (starts drawn from `gen`)."""
    if len(stream) <= length:
        raise ValueError(f"a stream of {len(stream)} tokens has no window of {length}")
    starts = torch.randint(0, len(stream) - length, (n,), generator=gen)
    return stream[starts[:, None] + torch.arange(length)].long()


def fixed_windows(stream: torch.Tensor, n: int, length: int) -> torch.Tensor:
    """n evenly spaced windows (the held-out evaluation set: no randomness, no overlap when it fits)."""
    if len(stream) <= length:
        raise ValueError(f"a stream of {len(stream)} tokens has no window of {length}")
    starts = torch.linspace(0, len(stream) - length - 1, n).long()
    return stream[starts[:, None] + torch.arange(length)].long()


def with_bos(rows: torch.Tensor, bos_id: int | None) -> torch.Tensor:
    """Windows start mid-document; a model that always saw BOS first (Gemma) gets it in place of the
    window's first token, as every input it was pretrained on began."""
    if bos_id is not None:
        rows[:, 0] = bos_id
    return rows
