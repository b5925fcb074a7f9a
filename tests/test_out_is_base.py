"""`--out` that is the run's `--base` (another spelling of it: `..`, a symlink), lies inside it, or holds
it is refused by name before anything is written, for every recipe that takes a base (convert, ORL,
RCD; pretraining takes none): orl.atomic_dir.check_apart, called through TrainLoop's check_output.

An orl-written base passes the other output checks (its orl.json lists every file), so without this
check the run's first checkpoint replaced the weights it starts from, a run inside the base wrote its
checkpoint and log into the base's directory, and a base inside --out (a pretraining run's stage1/ as
the base of an ORL run written over that pretraining run, with --fresh) lost the checkpoint beside it."""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
import torch

import orl.train.convert as cv
import orl.train.orl as trainer
import orl.train.rcd as rcd
from orl.atomic_dir import OutputIsInput
from orl.checkpoint import save_checkpoint
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer
from test_convert import base as ar_root, smoke_cfg  # noqa: F401 (ar_root: the tiny random AR checkpoint fixture)
from test_dist import orl_cfg

pytestmark = pytest.mark.usefixtures("one_thread")
LAYOUTS = ["dotdot", "symlink", "out_inside_base", "base_inside_out"]


def quiet(*_) -> None:
    pass


def snapshot(root: Path) -> dict[str, object]:
    """Every entry under root (hidden ones too): a file's bytes, a link's target, a directory."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(d) / name
            rel = str(p.relative_to(root))
            out[rel] = os.readlink(p) if p.is_symlink() else "<dir>" if p.is_dir() else p.read_bytes()
    return out


def arrange(src: Path, work: Path, layout: str) -> tuple[Path, Path]:
    """(base, out) for the layout, the base a copy of the checkpoint `src` under `work`."""
    if layout == "base_inside_out":  # a finished run whose stage1/ is the base
        shutil.copytree(src, work / "run")
        shutil.copytree(src, work / "run" / "stage1")
        return work / "run" / "stage1", work / "run"
    base = work / "base"
    shutil.copytree(src, base)
    if layout == "dotdot":
        return base, work / "base" / ".." / "base"
    if layout == "symlink":
        (work / "link").symlink_to(base, target_is_directory=True)
        return base, work / "link"
    return base, base / "run"


@pytest.fixture(scope="module")
def dllm(tmp_path_factory):
    """A tiny random block-diffusion checkpoint (the base of ORL and RCD)."""
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=True))
    return save_checkpoint(model, CharTokenizer(), tmp_path_factory.mktemp("dllm") / "base", {"block_len": 8})


def run_recipe(recipe: str, base: Path, out: Path, ar_root: Path, resume: bool) -> None:
    if recipe == "convert":
        cv.convert(dataclasses.replace(smoke_cfg(ar_root), base=str(base)), out, resume=resume, log=quiet)
    elif recipe == "orl":
        trainer.train_orl(orl_cfg(base), out, resume=resume, log=quiet)
    else:
        c = orl_cfg(base)
        cfg = rcd.RCDConfig(base=c.base, updates=2, prompts_per_update=3, group_size=2, save_every=2, eval_every=100,
                            eval_samples=1, threads=1, rollout=dataclasses.replace(c.rollout, residual="rcd"))
        rcd.train_rcd(cfg, out, resume=resume, log=quiet)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("recipe", ["convert", "orl", "rcd"])
def test_out_overlapping_the_base_is_refused_before_anything_is_written(recipe, layout, ar_root, dllm, tmp_path):
    src = ar_root / "base" if recipe == "convert" else dllm
    work = tmp_path / "work"
    work.mkdir()
    base, out = arrange(src, work, layout)
    before = snapshot(work)
    # --fresh: a base inside --out is the run's own stage1/, which a resume would refuse for its config
    said = {"out_inside_base": "lies inside the --base", "base_inside_out": "lies inside --out"}
    with pytest.raises(OutputIsInput, match=said.get(layout, "is the --base checkpoint")):
        run_recipe(recipe, base, out, ar_root, resume=layout != "base_inside_out")
    assert snapshot(work) == before  # not a byte changed, nothing added (a log, a hidden copy)


def test_a_sibling_whose_name_starts_like_the_base_is_not_inside_it(dllm, tmp_path):
    """base-copy/ beside base/ is another directory (a prefix test on strings would refuse it)."""
    from orl.atomic_dir import check_apart

    (tmp_path / "base").mkdir()
    check_apart(tmp_path / "base-copy", tmp_path / "base", "--base")
    check_apart(tmp_path / "base-copy" / "run", tmp_path / "base", "--base")
    with pytest.raises(OutputIsInput, match="lies inside"):
        check_apart(tmp_path / "base" / "x" / "y", tmp_path / "base", "--base")
