"""`orl eval` on a DiffusionGemma checkpoint (the tiny save_pretrained fixture): it decodes with
CanvasDecoder and writes the records every model gets, with the forwards the decoder really ran;
eval settings the canvas mode has no use for are refused by name."""
from __future__ import annotations

import pytest

from diffusion_gemma_fixture import CANVAS, write_diffusion_gemma
from orl.eval import metrics
from orl.eval.runner import EvalSpec, row_seed, run_eval

pytestmark = pytest.mark.usefixtures("one_thread")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("diffusion_gemma_eval")
    write_diffusion_gemma(d)
    return d


def _spec(d, out, **kw) -> EvalSpec:
    base = dict(model=str(d), out=str(out), tasks=["add"], limit=3, batch_size=1, progress=False,
                decode={"max_new_tokens": 6, "steps_per_block": 3, "chunk_steps": 1})
    return EvalSpec(**{**base, **kw})


def _forwards(r: dict) -> int:
    f = r["forwards"]
    return f["prefill"] + f["step"] + f["commit"]


def test_records_and_real_forward_count(written, tmp_path, monkeypatch):
    """Every model call is counted: the hook's count = the records' forwards (prefill, denoising passes,
    re-encodes) plus the untimed warm-up's, which decodes the first sample again with its seed."""
    import orl.checkpoint
    from orl.engine.canvas import CanvasConfig, CanvasDecoder

    calls, load = [], orl.checkpoint.load_checkpoint

    def counted(*a, **kw):
        model, tok, manifest = load(*a, **kw)
        model.register_forward_hook(lambda *_: calls.append(1))
        return model, tok, manifest

    monkeypatch.setattr(orl.checkpoint, "load_checkpoint", counted)
    recs = run_eval(_spec(written, tmp_path / "r.jsonl"))
    assert len(recs) == 3 and len(calls) == sum(map(_forwards, recs)) + _forwards(recs[0])
    for r in recs:
        assert r["decode"]["rule"] == "canvas" and r["decode"]["block_len"] == CANVAS
        assert r["decode"]["max_denoising_steps"] == 3 and r["decode"]["threshold"] is None
        assert r["forwards"]["prefill"] == 1 and r["forwards"]["commit"] == len(r["block_steps"]) - 1
        assert r["forwards"]["step"] == sum(r["block_steps"]) and max(r["block_steps"]) <= 3
        assert r["tpf"] == r["n_tokens"] / (r["forwards"]["step"] + r["forwards"]["commit"])
        assert r["timing"]["total_s"] > 0 and isinstance(r["verdict"], bool)

    # the records are the decoder's answers for each sample's row seed
    model, tok, manifest = load(str(written))
    dec = CanvasDecoder(model, tok, manifest=manifest)
    cfg = CanvasConfig(max_new_tokens=6, max_denoising_steps=3, chunk_steps=1)
    for r in recs:
        g = dec.generate(r["prompt"], cfg, seeds=[row_seed(0, r["prompt_id"], 0)])[0]
        assert (g.token_ids, g.step_forwards, g.commit_forwards) == (r["output_ids"], r["forwards"]["step"],
                                                                     r["forwards"]["commit"])
    pooled = metrics.pooled_tpf(recs)  # ratio of sums, the EOS-free one without finished rows' EOS
    fwd = sum(r["forwards"]["step"] + r["forwards"]["commit"] for r in recs)
    assert pooled["tpf"] == sum(r["n_tokens"] for r in recs) / fwd
    assert pooled["tpf_no_eos"] == (sum(r["n_tokens"] for r in recs) - sum(r["finished"] for r in recs)) / fwd

    # a stopped row is a no-op until the host looks: checking every 4 steps changes no token and no count
    later = run_eval(_spec(written, tmp_path / "r4.jsonl", decode={"max_new_tokens": 6, "steps_per_block": 3}))
    assert [(r["output_ids"], r["forwards"]) for r in later] == [(r["output_ids"], r["forwards"]) for r in recs]
    assert [r["prompt_id"] for r in later] == [r["prompt_id"] for r in recs]


def test_cli_eval_prints_summary_and_resumes(written, tmp_path, capsys):
    from orl.cli import main

    argv = ["eval", "--model", str(written), "--tasks", "add", "--limit", "2", "--max-new-tokens", "5",
            "--steps-per-block", "2", "--chunk-steps", "1", "--batch-size", "2", "--no-progress",
            "--out", str(tmp_path / "r.jsonl")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "canvas L4" in out
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert main(argv) == 0 and len((tmp_path / "r.jsonl").read_text().splitlines()) == 2  # resumed: nothing new


@pytest.mark.parametrize("kw, named", [
    ({"thresholds": [0.5]}, "--threshold / --thresholds"),
    ({"decode": {"rule": "threshold", "max_new_tokens": 4}}, "--rule"),
    ({"decode": {"temperature": 0.5}}, "--temperature"),
    ({"decode": {"residual": "rcd", "cuda_graph": True}}, "--residual, --cuda-graph"),
])
def test_settings_that_do_not_apply_are_refused_by_name(written, tmp_path, kw, named):
    out = tmp_path / "r.jsonl"
    with pytest.raises(ValueError, match=f"{named}: not used by diffusion_gemma canvas decoding"):
        run_eval(_spec(written, out, **kw))
    assert not out.exists()


def test_cli_refusal_exit_2(written, tmp_path, capsys):
    from orl.cli import main

    rc = main(["eval", "--model", str(written), "--tasks", "add", "--limit", "1", "--top-k", "5",
               "--out", str(tmp_path / "r.jsonl")])
    assert rc == 2 and "--top-k: not used by diffusion_gemma" in capsys.readouterr().err
