"""Choosing a run's checkpoint on a validation split, so that the test records stay untuned.

A run's late checkpoints can lose what its earlier ones had: prog7xp beyond its training range fell from
31.7% at step 5,000 to 16.7% at step 7,000 in one run (docs/TRAINING.md, session 28). Reporting the best
checkpoint by its test records would tune on the test. The checkpoint is chosen by the validation records
alone (other prompts: `orl eval --seed 100`, where the test uses seeds 0-2), and only the chosen one's
test records are reported, beside the final checkpoint's.

The score of a checkpoint is the mean over families of its accuracy on one split (`beyond` by default:
issue 21's "mean beyond"), optionally only among checkpoints whose in-range accuracy reaches a floor. Ties
go to the later checkpoint: the final one is the default, and selection departs from it only for a strict
gain on validation; when no checkpoint reaches the in-range floor, the final one is kept and the selection
says so. Validation prompts that also occur in the test records are left out of the score.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

from orl.eval.headline import pair_key
from orl.eval.records import decoder_label, latest_records
from orl.eval.tasks import HELPER_NAMES


@dataclass(frozen=True)
class Candidate:
    name: str                                   # the model name of its records
    counts: dict[str, dict[str, tuple[int, int]]]  # split -> family -> (right, scored) on the validation prompts
    n: int                                      # validation prompts scored

    @property
    def acc(self) -> dict[str, dict[str, float]]:
        return {s: {f: r / n for f, (r, n) in fams.items()} for s, fams in self.counts.items()}

    def exact_mean(self, split: str) -> Fraction:
        """Mean family accuracy as a fraction, so that equal scores tie exactly (0.4 + 0.2 != 0.6 + 0.0 in floats)."""
        fams = self.counts.get(split, {})
        return sum((Fraction(r, n) for r, n in fams.values()), Fraction(0)) / len(fams) if fams else Fraction(-1)

    def mean(self, split: str) -> float:
        return float(self.exact_mean(split)) if self.counts.get(split) else float("nan")


@dataclass(frozen=True)
class Selection:
    candidates: tuple[Candidate, ...]  # in training order, as given
    chosen: str
    split: str
    min_in_range: float
    left_out: int                      # validation prompts also in the test records
    floor_met: bool                    # some candidate reached min_in_range (else the final one is kept)


def decoder_of(r: dict) -> tuple:
    """What besides the model decides a record's verdict: the decoder, its threshold and the answer budget."""
    return decoder_label(r["decode"]), r["decode"].get("threshold"), r["decode"].get("max_new_tokens")


def verdicts(records: list[dict], name: str) -> dict[tuple, bool]:
    """(split, family, prompt text, prompt id, seed, sample) -> verdict of one model's records, its last
    record per prompt; the training-only helper tasks are left out. The records must be of one model and one
    decoder: two thresholds of one prompt would otherwise overwrite each other in file order."""
    mine = [r for r in records if r["model"]["name"] == name]
    ids, decoders = {r["model"]["id"] for r in mine}, {decoder_of(r) for r in mine}
    if len(ids) > 1:
        raise ValueError(f"{name!r} names {len(ids)} different models (directories or weights of one name); give "
                         "each run's records apart, or name the runs' directories apart")
    if len(decoders) > 1:
        raise ValueError(f"{name!r} has records of {len(decoders)} decoders, thresholds or answer budgets "
                         f"({', '.join(sorted(map(str, decoders)))}); give the records of one")
    out = {}
    for r in latest_records(mine):
        if r["task"] not in HELPER_NAMES:
            out[(r["split"], r["task"], r["prompt"], *pair_key(r))] = bool(r["verdict"])
    return out


def score(by_prompt: dict[tuple, bool], name: str) -> Candidate:
    """A checkpoint's (right, scored) per split and family from `verdicts`' output."""
    right: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for (split, fam, *_), ok in by_prompt.items():
        right[split][fam][0] += ok
        right[split][fam][1] += 1
    counts = {s: {f: (r, n) for f, (r, n) in fams.items()} for s, fams in right.items()}
    return Candidate(name, counts, len(by_prompt))


def select(validation: list[dict], names: list[str], test: list[dict] = (), split: str = "beyond",
           min_in_range: float = 0.0, in_range: str = "heldout") -> Selection:
    """The best of `names` (one run's checkpoints, earliest first) by validation mean accuracy on `split`.

    Every candidate must have been scored on the same validation prompts, so that their scores compare; a
    validation prompt that is also a test prompt (same split, family and text) is not scored."""
    if not names:
        raise ValueError("select needs at least one checkpoint name")
    if len(set(names)) != len(names):
        raise ValueError(f"a checkpoint is named twice: {names}")
    if not 0.0 <= min_in_range <= 1.0:
        raise ValueError(f"min_in_range is a fraction in [0, 1], got {min_in_range}")
    test_prompts = {(r["split"], r["task"], r["prompt"]) for r in test}
    known = sorted({r["model"]["name"] for r in validation})
    by_name, left_out = {}, set()
    for name in names:
        v = verdicts(validation, name)
        if not v:
            raise ValueError(f"no validation records of {name!r}; the validation records hold {', '.join(known)}")
        left_out |= {k for k in v if k[:3] in test_prompts}
        by_name[name] = v
    first = names[0]
    decoders = {n: decoder_of(next(r for r in validation if r["model"]["name"] == n)) for n in names}
    for name in names[1:]:
        if decoders[name] != decoders[first]:
            raise ValueError(f"{name!r} and {first!r} were validated with different decoders ({decoders[name]} and "
                             f"{decoders[first]}): their scores do not compare")
        if by_name[name].keys() != by_name[first].keys():
            only = len(by_name[name].keys() ^ by_name[first].keys())
            raise ValueError(f"{name!r} and {first!r} were validated on different prompts ({only} in only one of "
                             "them): evaluate every checkpoint with the same --tasks, --split, --limit and --seed")
    if split not in {k[0] for k in by_name[first]}:
        raise ValueError(f"no validation records on split {split!r}")
    if min_in_range > 0 and in_range not in {k[0] for k in by_name[first]}:
        raise ValueError(f"min_in_range needs validation records on split {in_range!r}")
    cands = tuple(score({k: ok for k, ok in by_name[n].items() if k not in left_out}, n) for n in names)
    for s in {split, in_range} if min_in_range > 0 else {split}:
        if s not in cands[0].counts:
            raise ValueError(f"nothing left to score on split {s!r}: all its validation prompts are also test "
                             "prompts (validate on another prompt seed than the test's)")
    floor = Fraction(str(float(min_in_range)))  # 0.8 as 4/5, not as the binary float just above it
    eligible = [c for c in cands if min_in_range == 0 or c.exact_mean(in_range) >= floor]
    # max() keeps the first of equals: scan latest first so that a tie goes to the later checkpoint
    chosen = max(reversed(eligible), key=lambda c: c.exact_mean(split)) if eligible else cands[-1]
    return Selection(cands, chosen.name, split, min_in_range, len(left_out), bool(eligible))
