"""What every training recipe (pretrain, ORL, RCD) shares: the output directory's safety checks,
exact resume, the config check on resume, the JSONL log, the eval/save cadence, the optimizer.

The trainer state (optimizer, step, config) is saved inside the checkpoint's atomic write and loaded
with `torch.load(weights_only=True)`: a planted pickle cannot run code. A resumed run must have the
config it was started with, except fields that do not change the trajectory (threads, cadences);
`allow_config_change` lets a user continue anyway, and the change is logged.
"""
from __future__ import annotations

import io
import json
import math
import pickle
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm import tqdm

from orl.atomic_dir import NotOrlDirectory, check_apart, check_replaceable, copy_checkpoint, read_manifest, recover
from orl.eval.tasks import HELPER_NAMES
from orl.train.dist import SINGLE, Dist
from orl.train.fsdp import full_state, load_optimizer
from orl.train.runlog import open_log

TRAIN_STATE = "trainer_state.pt"
# fields a resumed run may change: they decide when and how far to log, evaluate and save, or how the work is
# spread over processes (the checkpoint is the same under DDP and FSDP), not what is learned
RESUME_FREE = frozenset({"threads", "eval_every", "eval_samples", "eval_max_new_tokens", "save_every", "parallel",
                         "keep_every"})


class ResumeError(ValueError):
    pass


def _quiet(*_) -> None:
    pass


def config_dict(cfg) -> dict:
    """The config as plain JSON values (tuples become lists), as it is stored and compared."""
    return json.loads(json.dumps(asdict(cfg), default=str))


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_diff(old: dict, new: dict, free: frozenset[str] = RESUME_FREE, defaults: dict | None = None) -> list[str]:
    """Changed fields, `free` ones aside. A field the saved config lacks (added to orl since the run
    started) counts as unchanged while it holds its default."""
    a, b, d = _flatten(old), _flatten(new), _flatten(defaults or {})
    return [f"{k}: {a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r}" for k in sorted(a.keys() | b.keys())
            if a.get(k) != b.get(k) and k.split(".")[-1] not in free
            and not (k not in a and k in d and b.get(k) == d[k])]


def _defaults(cfg_type, config: dict) -> dict:
    """Each field's default (nested configs as their default factories make them)."""
    try:
        return config_dict(cfg_type())
    except TypeError:  # a config without defaults for every field
        return {}


def check_output(*dirs: Path, inputs: Mapping[str, str | Path] | None = None) -> None:
    """Refuse an output that is, holds or lies inside one of the run's `inputs` ({"--base": path}),
    then finish interrupted writes and refuse any output orl may not replace - before anything is
    written (recover may rename and delete hidden copies beside the output)."""
    for flag, path in (inputs or {}).items():
        if path:
            check_apart(Path(dirs[0]), Path(path), flag)
    for d in dirs:  # --out first: a stage-1 copy inside it is recovered once --out is back
        if done := recover(d):
            print(f"orl: {done}", file=sys.stderr)
    for d in dirs:
        try:
            check_replaceable(Path(d).resolve())
        except NotOrlDirectory as e:
            raise ResumeError(str(e)) from None


def snapshot_dirs(out: Path, every: int, total: int) -> dict[int, Path]:
    """keep_every's copies: OUT-atSTEP beside OUT every `every` steps before the last (the last is OUT). Beside,
    not inside: each is a checkpoint of its own that `orl eval` and `orl serve` take as it is."""
    out = Path(out).resolve()
    return {n: out.parent / f"{out.name}-at{n}" for n in range(every, total, every)} if every > 0 else {}


def load_train_state(out: Path) -> dict:
    from orl.checkpoint_checks import CheckpointError, read_json, verify_checksums

    verify_checksums(out, read_json(out / "orl.json"), [TRAIN_STATE])
    try:
        state = torch.load(out / TRAIN_STATE, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        raise CheckpointError(f"{out / TRAIN_STATE} holds Python objects that would run code when loaded; "
                              f"refusing to unpickle it ({str(e).splitlines()[0]})") from None
    except (RuntimeError, EOFError, OSError) as e:
        raise CheckpointError(f"cannot read {out / TRAIN_STATE}: {e}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{out / TRAIN_STATE} is not a trainer state (expected a dict)")
    return state


def train_state_bytes(state: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


class TrainLoop:
    """The frame of one run: `out` is checked and recovered at construction; `state` holds the trainer
    state of a resumed run (None for a fresh one) and `start` its step."""

    def __init__(self, cfg, out: str | Path, total: int, key: str, *, resume: bool = True,
                 allow_config_change: bool = False, extra_outputs: tuple[Path, ...] = (),
                 inputs: Mapping[str, str | Path] | None = None, log: Callable = tqdm.write, dist: Dist = SINGLE,
                 keep_every: int = 0):
        """inputs: what the run reads and must never write ({"--base": cfg.base}; check_output).
        keep_every: also keep the checkpoint of every this many steps as OUT-atSTEP (`snapshots`: step -> dir;
        the recipe writes them, before `out`)."""
        if total <= 0:
            raise ValueError(f"nothing to train: the run has {total} {key}s")
        # under torchrun only rank 0 speaks and writes; the other ranks train the same steps silently
        self.dist, self.log = dist, log if dist.main else _quiet
        self.out, self.total, self.key = Path(out).resolve(), total, key
        # rank 0 alone recovers interrupted writes; the others wait, then all read the same checkpoint
        dist.on_main(lambda: check_output(self.out, *extra_outputs, inputs=inputs))
        self.config, self.cfg_type = config_dict(cfg), type(cfg)
        # every rank reads the state (each steps its own optimizer); one that cannot stops them all
        self.state, digest = dist.on_every(lambda: self._read_state(resume, allow_config_change))
        self.start = int(self.state[key]) if self.state else 0
        self._check_same_run(digest)
        self.snapshots = snapshot_dirs(self.out, keep_every, total)
        # an ORL / RCD run extended with more updates resumes at what was its last one: `out` holds that copy's
        # checkpoint, and its later saves would replace it, so a missing copy of the start is made from it now
        start_copy = self.snapshots.get(self.start)
        if start_copy is not None and read_manifest(start_copy) is not None:
            start_copy = None  # written already
        dist.on_main(lambda: self.check_snapshots({n: d for n, d in self.snapshots.items()
                                                   if n > self.start or d == start_copy}, inputs))
        if start_copy is not None:
            dist.on_main(lambda: copy_checkpoint(self.out, start_copy))
        if self.start:
            self.log(f"resumed from {self.out} at {key} {self.start}")
        self.log_path = open_log(self.out, self.start, key) if dist.main else None
        self.t0, self.last_eval = time.perf_counter(), None

    def _read_state(self, resume: bool, allow_config_change: bool) -> tuple[dict | None, int]:
        """The trainer state of a resumed run (None: a fresh one) and 60 bits of its recorded sha256."""
        if not (resume and (self.out / TRAIN_STATE).exists()):
            return None, 0
        state = load_train_state(self.out)  # verifies the file against orl.json's sha256
        self._check_config(state.get("config"), allow_config_change)
        digest = (read_manifest(self.out) or {}).get("files", {}).get(TRAIN_STATE, "")
        return state, int(digest[-15:], 16) if digest else 0

    def _check_same_run(self, digest: int) -> None:
        """Refuse ranks that found different checkpoints in --out (each node its own disk): trained on,
        they would average gradients of unrelated steps into a checkpoint labelled with rank 0's step."""
        if not self.dist.launched:
            return
        found = self.dist.gather_lists([[self.start, digest]])
        if all(f == found[0] for f in found):
            return
        seen = ", ".join(f"rank {r}: {self.key} {s}" + ("" if s else " (no checkpoint)") for r, (s, _) in
                         enumerate(found))
        raise ResumeError(f"{self.out}: the processes find different checkpoints there ({seen}); every process "
                          "must see the same --out (with several nodes, a directory they all share)")

    def _check_config(self, saved: dict | None, allow: bool) -> None:
        if saved is None:
            self.log(f"note: {self.out} records no config; it cannot be compared with this run's")
            return
        diff = config_diff(saved, self.config, RESUME_FREE | getattr(self.cfg_type, "RESUME_FREE", frozenset()),
                           _defaults(self.cfg_type, self.config))
        if diff and not allow:
            raise ResumeError(f"{self.out} holds a run with another config; rerun with the same settings, choose "
                              "another --out, or pass --allow-config-change:\n  " + "\n  ".join(diff))
        if diff:
            self.log("config changed on resume (--allow-config-change): " + "; ".join(diff))

    def check_snapshots(self, dirs: Mapping[int, Path], inputs: Mapping[str, str | Path] | None = None) -> None:
        """Ready the keep_every copies this run will still write (those past its start): interrupted writes
        finished, and a refusal before the first step when one is a symlink, holds what orl did not write, or
        holds another run's checkpoint (an orl directory passes check_output, but it is not ours to replace).
        Ours are of this run's config or, after --allow-config-change, of the config it resumed from."""
        ours = [self.config] + ([self.state["config"]] if self.state and isinstance(self.state.get("config"), dict) else [])
        free = RESUME_FREE | getattr(self.cfg_type, "RESUME_FREE", frozenset())
        for d in dirs.values():
            if d.is_symlink():
                raise ResumeError(f"refusing to write {d}: it is a symlink; keep_every writes a directory there")
            check_output(d, inputs=inputs)  # recovered, replaceable, and not the run's --base
            if not d.is_dir() or not any(d.iterdir()):
                continue
            saved = ((read_manifest(d) or {}).get("recipe") or {}).get("config")
            if not isinstance(saved, dict) or all(config_diff(saved, c, free, _defaults(self.cfg_type, c)) for c in ours):
                raise ResumeError(f"refusing to replace {d}: keep_every would write this run's checkpoint there, and it "
                                  "holds a checkpoint of another run; move it away or choose another --out")

    def steps(self) -> Iterator[int]:
        self.bar = tqdm(range(self.start, self.total), initial=self.start, total=self.total, dynamic_ncols=True,
                        disable=not self.dist.main)
        return iter(self.bar)

    def due(self, done: int, every: int, batch: int = 1) -> bool:
        """After update `done`, whether a save is due: every `every` updates and at the end. With updates in
        batches of `batch` (ORL's rollout_reuse) a save due inside a batch waits for its last update."""
        return done == self.total or (done % batch == 0 and done // every > (done - batch) // every)

    def out_of_time(self, limit_s: float) -> bool:
        """Whether the run has used its wall-clock budget (0: none). Under torchrun every rank gets rank
        0's answer (one collective), so no rank leaves the loop alone and the others hang."""
        if limit_s <= 0:
            return False
        over = self.dist.main and time.perf_counter() - self.t0 > limit_s
        return bool(self.dist.all_sum(torch.tensor([float(over)])) > 0)  # rank 0's answer on every rank

    def write(self, rec: dict) -> None:
        if "eval" in rec:
            self.last_eval = rec["eval"]
        if not self.dist.main:
            return
        with open(self.log_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def finish(self, done: int | None = None) -> None:
        """The end-of-run summary: what ran, how long, the last held-out result, where things are.
        done: the last step trained when the run stopped early (its time limit), else the end."""
        self.dist.barrier()  # every rank returns once the last checkpoint is on disk
        minutes = (time.perf_counter() - self.t0) / 60
        if self.start >= self.total:
            self.log(f"nothing to do: {self.out} already holds all {self.total} {self.key}s")
            return
        last = self.total if done is None else done
        span = f"{self.start + 1}-{last}"
        if last < self.total:
            span += f" of {self.total} in {minutes:.1f} min (its time limit: rerun the same command to go on)"
        else:
            span += f" in {minutes:.1f} min"
        self.log(f"done: {self.key}s {span}; checkpoint {self.out}; log {self.log_path}")
        if self.last_eval:
            self.log(heldout_summary(self.last_eval))

    def save(self, model, tok, manifest: dict, opt: torch.optim.Optimizer, done: int, target: Path | None = None,
             files: dict[str, bytes] | None = None, **state) -> None:
        """Atomic checkpoint + the trainer state that resumes it exactly (+ `files`, name -> bytes, written in
        the same atomic step). Every rank calls it: a sharded model's weights and optimizer state are gathered
        to rank 0, which writes them."""
        from orl.checkpoint import save_checkpoint

        weights, optimizer = full_state(model, opt)
        full = {self.key: done, "optimizer": optimizer, "config": self.config, **state}

        def write() -> None:
            sd = weights if weights is not None else model.state_dict()
            if bad := [n for n, t in sd.items() if t.is_floating_point() and not torch.isfinite(t).all()]:
                # the last good checkpoint stays: a NaN copy would replace it, and nothing would load it again
                raise FloatingPointError(f"{self.key} {done}: non-finite weights ({', '.join(bad[:3])}"
                                         f"{' ...' if len(bad) > 3 else ''}); not saved over {target or self.out}, "
                                         "which keeps the last good checkpoint; lower lr or check the data")
            save_checkpoint(model, tok, target or self.out, manifest, state=weights,
                            extra_files={**(files or {}), TRAIN_STATE: train_state_bytes(full)})

        # rank 0 writes; a failed write (a full disk, NaN weights) stops the others here, not in the next step's sync
        self.dist.on_main(write)

    def load_optimizer(self, model, opt: torch.optim.Optimizer) -> None:
        """The resumed run's optimizer state into `opt` (built on the model as it trains: sharded or not)."""
        load_optimizer(model, opt, self.state["optimizer"])


def check_fields(cfg, positive: tuple[str, ...] = (), non_negative: tuple[str, ...] = ()) -> list[str]:
    """Problems with numeric fields, for a config's __post_init__ (a --set override reruns it)."""
    problems = [f"{n} must be > 0, got {getattr(cfg, n)}" for n in positive if not getattr(cfg, n) > 0]
    problems += [f"{n} must be >= 0, got {getattr(cfg, n)}" for n in non_negative if not getattr(cfg, n) >= 0]
    # inf passes both (lr=inf trained on NaN and saved weights nothing would load); NaN fails every comparison
    return problems + [f"{n} must be finite, got {getattr(cfg, n)}" for n in (*positive, *non_negative)
                       if getattr(cfg, n) == math.inf]


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float = 0.0,
                   adapter_lr: float | None = None) -> torch.optim.Optimizer:
    """AdamW; matrices decay, vectors (norms) do not; the residual adapter gets its own learning rate."""
    groups: dict[str, list] = {"decay": [], "no_decay": [], "adapter": []}
    for n, p in model.named_parameters():
        kind = "adapter" if adapter_lr is not None and "residual_adapter" in n else "decay" if p.ndim >= 2 else "no_decay"
        groups[kind].append(p)
    settings = {"decay": (lr, weight_decay), "no_decay": (lr, 0.0), "adapter": (adapter_lr, 0.0)}
    return torch.optim.AdamW([{"params": ps, "lr": settings[k][0], "weight_decay": settings[k][1], "name": k}
                              for k, ps in groups.items() if ps], betas=(0.9, 0.95))


def heldout_summary(last_eval: Mapping[str, object]) -> str:
    """The run's last held-out accuracies as one line; the mean is over the benchmark families only, since a helper
    (training only, HELPER_NAMES) is never part of a headline number."""
    accs = {k: v["acc"] for k, v in last_eval.items() if isinstance(v, dict) and "acc" in v}
    families = {k: a for k, a in accs.items() if k not in HELPER_NAMES}
    helpers = {k: a for k, a in accs.items() if k in HELPER_NAMES}
    line = (f"held-out accuracy: mean {100 * sum(families.values()) / max(len(families), 1):.1f}% ("
            + ", ".join(f"{k} {100 * a:.1f}%" for k, a in families.items()) + ")")
    if helpers:
        line += "; helpers, not in the mean: " + ", ".join(f"{k} {100 * a:.1f}%" for k, a in helpers.items())
    return line
