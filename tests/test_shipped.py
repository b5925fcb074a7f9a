"""The shipped checkpoints load through the real loader and reach their documented held-out accuracy
(docs/RESULTS.md). Greedy decoding of fixed held-out samples is deterministic, so the bounds are
stable; they sit well under the measured values but far above what an untrained model scores (0)."""
import re
from pathlib import Path

import pytest

from orl.checkpoint import load_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.eval.tasks import SUITE, SUITE_V5, get_task

ROOT = Path(__file__).resolve().parent.parent / "checkpoints"


def heldout(path: Path, tasks: tuple[str, ...], n: int, **decode) -> tuple[float, float, dict]:
    """Accuracy and pooled TPF on the first n held-out samples of each family, decoded with the
    checkpoint's own block length and residual mode; plus its manifest."""
    model, tok, manifest = load_checkpoint(path)
    cfg = DecodeConfig(block_len=manifest["block_len"], max_new_tokens=64,
                       residual=manifest["residual_mode"], **decode)
    samples = [get_task(t).sample("heldout", i) for t in tasks for i in range(n)]
    gens = Engine(model, tok).generate([s.prompt for s in samples], cfg)
    acc = sum(get_task(s.task).verify(s.prompt, g.text) for s, g in zip(samples, gens)) / len(samples)
    return acc, sum(g.n_tokens for g in gens) / sum(g.forwards for g in gens), manifest


def accuracy(path: Path, tasks: tuple[str, ...], n: int, **decode) -> float:
    return heldout(path, tasks, n, **decode)[0]


def test_base_checkpoint_manifest():
    _, tok, manifest = load_checkpoint(ROOT / "orl-tiny-base")
    assert manifest["block_len"] == 16 and manifest["residual_mode"] == "off"
    assert manifest["recipe"]["name"] == "pretrain"
    assert (manifest["mask_id"], manifest["eos_id"]) == (tok.mask_id, tok.eos_id)


@pytest.mark.parametrize("decode", [{"rule": "topk"}, {"rule": "threshold", "threshold": 0.9}])
def test_base_learned_its_strong_families(decode):
    # measured (docs/RESULTS.md, 40 held-out each): split 87.5%, constr 100% with conservative decoding
    # and at threshold 0.9; on these 30 samples 93.3% with either rule
    assert accuracy(ROOT / "orl-tiny-base", ("split", "constr"), 15, **decode) >= 0.8


def test_base_mean_accuracy_over_all_families():
    # measured: mean 89.5% over the five families of tasks v6 (40 each, conservative decoding); 92% on
    # these 50
    assert accuracy(ROOT / "orl-tiny-base", SUITE, 10, rule="topk") >= 0.8


def test_demo_main_job_runs():
    """The README's main job: `orl demo` on the shipped length-varied pair, scored by the fused decoder its base is
    measured with (default_spec_tokens), in range and beyond, and the example round by round."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "orl.cli", "demo", "--per-task", "1"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ORL / base: TPF x" in out.stdout and "round by round" in out.stdout
    assert "fused self-speculative decoder (8 drafted tokens, 3 groups" in out.stdout
    assert re.search(r"base +long7xp, .*: in range [\d.]+%, beyond the training range [\d.]+%", out.stdout)


def test_ar_peer_exports_and_matches_transformers_generate(tmp_path):
    """The shipped AR peer (checkpoints/orl-tiny-ar) through our AR decoder == transformers' greedy
    generate on its HF export, token for token, on held-out prompts of every family."""
    import torch
    import transformers

    from orl.engine.ar import ARConfig, ARDecoder
    from orl.export import export_hf

    model, tok, manifest = load_checkpoint(ROOT / "orl-tiny-ar")
    assert manifest["objective"] == "autoregressive"
    hf = transformers.Qwen3ForCausalLM.from_pretrained(export_hf(model, tok, tmp_path / "hf")).eval()
    samples = [get_task(t).sample("heldout", i) for t in SUITE_V5 for i in range(3)]
    ours = ARDecoder(model, tok).generate([s.prompt for s in samples], ARConfig(max_new_tokens=64))
    for s, g in zip(samples, ours):
        ids = torch.tensor([tok.encode(s.prompt)])
        want = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, do_sample=False)
        want = want[0, ids.shape[1]:].tolist()
        assert g.token_ids == want, s.prompt


def test_decoders_refuse_the_other_objective(tmp_path):
    from orl.checkpoint import CheckpointError
    from orl.engine.ar import ARDecoder

    with pytest.raises(CheckpointError, match="autoregressive model.*ARDecoder"):
        Engine.from_checkpoint(ROOT / "orl-tiny-ar")
    with pytest.raises(CheckpointError, match="block_diffusion model.*Engine"):
        ARDecoder.from_checkpoint(ROOT / "orl-tiny-base")
    assert ARDecoder.from_checkpoint(ROOT / "orl-tiny-ar").objective == "autoregressive"


def test_eval_runs_the_ar_peer_with_its_own_decoder(tmp_path):
    """`orl eval` on an AR checkpoint decodes greedily left to right (TPF 1) and the report accepts it."""
    from orl.eval.report import build_report
    from orl.eval.runner import EvalSpec, run_eval

    recs = run_eval(EvalSpec(model=str(ROOT / "orl-tiny-ar"), out=str(tmp_path / "ar.jsonl"), tasks=["long", "add"],
                             limit=4, thresholds=[0.5, 0.9], progress=False))
    assert len(recs) == 8 and all(r["decode"]["rule"] == "ar" and r["tpf"] == 1.0 for r in recs)
    # long is in tasks v6, which the peer was trained on (97.5% on 120 held-out prompts)
    assert sum(r["verdict"] for r in recs if r["task"] == "long") >= 3
    build_report([tmp_path / "ar.jsonl"], tmp_path / "rep")
    assert "AR" in (tmp_path / "rep" / "summary.csv").read_text()


def test_orl_checkpoint_commits_more_per_forward_than_its_base():
    """Same held-out prompts, same decoder (threshold 0.9): the shipped ORL model (adapter residual from
    its manifest) loses at most 5 points of the base's accuracy (it gains 10 here) and needs far fewer
    forwards.
    Measured on these 60 prompts (12 per family of the suite): base 85.0% / 2.88 tokens per forward,
    ORL 95.0% / 4.34 (x1.51; split alone goes from 1.55 to its ceiling, 8)."""
    base_acc, base_tpf, _ = heldout(ROOT / "orl-tiny-base", SUITE, 12, threshold=0.9)
    orl_acc, orl_tpf, manifest = heldout(ROOT / "orl-tiny-orl", SUITE, 12, threshold=0.9)
    assert manifest["block_len"] == 16
    assert manifest["residual_mode"] == "adapter" and manifest["recipe"]["name"] == "orl"
    assert orl_acc >= base_acc - 0.05 and orl_tpf > 1.25 * base_tpf
