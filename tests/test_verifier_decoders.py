"""A draft-only conversion (orl.train.draft_only) under `orl eval` and `orl serve`: both attach the verifier it
records (orl.verifier), so what they return is the verifier's greedy text; alone (no --spec-draft) it is refused
by name; eval records name the verifier, so decodes verified by different checkpoints never share records."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import openai
import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.eval.runner import EvalSpec, run_eval
from orl.train import convert as cv
from test_convert import base, smoke_cfg  # noqa: F401  (base: a module fixture)
from test_serve import get, serving

pytestmark = pytest.mark.usefixtures("one_thread")
FUSED = ("--spec-tokens", "2", "--spec-draft", "fused")
DRAFT = dict(draft_only=True, freeze_embeddings=True, draft_aux=1.0, draft_tokens=2, draft_stride=2,
             draft_target="ar", steps=2)


@pytest.fixture(scope="module")
def drafter(base):
    cfg = smoke_cfg(base, **DRAFT)
    cv.convert(cfg, base / "drafter", log=lambda *_: None)
    return base / "drafter", base / "base"


def greedy(ckpt, prompts: list[str], n: int) -> list[str]:
    model, tok, manifest = load_checkpoint(ckpt)
    dec = ARDecoder(model, tok, manifest=manifest)
    return [g.text for g in dec.generate(prompts, ARConfig(max_new_tokens=n))]


def spec(d, out, **kw) -> EvalSpec:
    return EvalSpec(model=str(d), out=str(out), tasks=["constr"], limit=3, decode={"max_new_tokens": 10},
                    ar={"spec_tokens": 2, "spec_draft": "fused"}, batch_size=1, progress=False, **kw)


def test_eval_decodes_the_verifiers_tokens_and_records_name_it(drafter, tmp_path):
    d, b = drafter
    recs = run_eval(spec(d, tmp_path / "r.jsonl"))
    assert [r["output_text"] for r in recs] == greedy(b, [r["prompt"] for r in recs], 10)
    assert {r["model"]["verifier"]["path"] for r in recs} == {str(b.resolve())}
    with pytest.raises(ValueError, match="--spec-draft fused"):
        run_eval(replace(spec(d, tmp_path / "x.jsonl"), ar={}))


def test_a_plain_conversion_with_and_without_a_verifier_keeps_apart_records(base, tmp_path):
    """The same converted checkpoint decoded by its own AR path and by the original's: other tokens, so other
    record ids in one file (neither resumes the other), and the second gives the original's greedy text."""
    c = tmp_path / "conv"
    cv.convert(smoke_cfg(base, steps=2), c, log=lambda *_: None)
    own = run_eval(spec(c, tmp_path / "r.jsonl"))
    verified = run_eval(spec(c, tmp_path / "r.jsonl", spec_verifier=str(base / "base")))
    assert len(verified) == 3 and {r["model"]["id"] for r in own}.isdisjoint({r["model"]["id"] for r in verified})
    assert "verifier" not in own[0]["model"]
    assert [r["output_text"] for r in verified] == greedy(base / "base", [r["prompt"] for r in verified], 10)
    assert [r["output_text"] for r in own] == greedy(c, [r["prompt"] for r in own], 10)
    # a draft vocabulary: the same text, other forwards, so records of their own too
    from orl.checkpoint import read_model_args
    from orl.model.draft_vocab import write_ids

    write_ids(tmp_path / "dv.json", torch.arange(20), read_model_args(c).vocab_size, {})
    narrow = run_eval(spec(c, tmp_path / "r.jsonl", spec_verifier=str(base / "base"),
                           draft_vocab=str(tmp_path / "dv.json")))
    assert [r["output_text"] for r in narrow] == [r["output_text"] for r in verified]
    assert narrow[0]["model"]["id"] != verified[0]["model"]["id"] and "draft_vocab" in narrow[0]["model"]


def test_serve_answers_with_the_verifiers_tokens(drafter):
    d, b = drafter
    prompts = ["def f", "import os\n"]
    with serving(d, *FUSED) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
        name = f"{d.name}+{b.name}"  # the answers are the verifier's: the served id says so
        assert [m.id for m in client.models.list().data] == [name]
        got = [client.completions.create(model=name, prompt=p, max_tokens=12).choices[0].text for p in prompts]
        info = get(url, "/v1/dlm/info")
    assert got == greedy(b, prompts, 12)
    assert info["decoder"] == "autoregressive" and info["defaults"]["spec_draft"] == "fused"


@pytest.mark.parametrize("flags, words", [
    ((), "decodes only self-speculatively: add --spec-draft fused"),       # alone: its clean rows never trained
    (("--spec-tokens", "2", "--spec-draft", "lookup"), "decodes only self-speculatively"),
    ((*FUSED, "--spec-verifier", "/nonexistent/verifier"), "--spec-verifier /nonexistent/verifier: no such"),
    (("--draft-vocab", "/nonexistent/dv.json"), "only for self-speculative decoding"),    # before any load
])
def test_serve_refuses_a_drafter_without_its_verifier(drafter, flags, words):
    out = subprocess.run([sys.executable, "-m", "orl.cli", "serve", "--model", str(drafter[0]), "--port", "0", *flags,
                          "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and words in out.stderr, out.stderr
