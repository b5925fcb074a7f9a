"""`orl generate --dtype`: the weights are cast at load (load_checkpoint's dtype), and a bad name exits 2
naming it before anything loads."""
import json

import pytest
import torch

import orl.checkpoint
from orl.checkpoint import save_checkpoint
from orl.cli import main
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("dtype") / "m"
    save_checkpoint(random_model(1, vocab_size=TOK.vocab_size), TOK, d, {"block_len": 4})
    return d


def test_generate_casts_at_load(ckpt, monkeypatch, capsys):
    seen = []
    load = orl.checkpoint.load_checkpoint

    def recording(*a, **kw):
        model, tok, manifest = load(*a, **kw)
        seen.append(next(model.parameters()).dtype)
        return model, tok, manifest

    monkeypatch.setattr(orl.checkpoint, "load_checkpoint", recording)
    assert main(["generate", "--model", str(ckpt), "hi", "--max-new-tokens", "4", "--dtype", "bfloat16"]) == 0
    assert main(["generate", "--model", str(ckpt), "hi", "--max-new-tokens", "4"]) == 0
    assert seen == [torch.bfloat16, torch.float32]


def test_generate_bad_dtype_exits_2(ckpt, capsys):
    assert main(["generate", "--model", str(ckpt), "hi", "--dtype", "float8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("orl generate: error:") and "float8" in err


def test_eval_casts_at_load_and_keeps_its_records_apart(ckpt, tmp_path, monkeypatch):
    from orl.eval.runner import EvalSpec, run_eval

    seen = []
    load = orl.checkpoint.load_checkpoint

    def recording(*a, **kw):
        out = load(*a, **kw)
        seen.append(next(out[0].parameters()).dtype)
        return out

    monkeypatch.setattr(orl.checkpoint, "load_checkpoint", recording)
    out = tmp_path / "records.jsonl"
    common = dict(model=str(ckpt), out=str(out), tasks=["add"], limit=1, decode={"block_len": 4, "max_new_tokens": 4},
                  batch_size=1, progress=False)
    plain = run_eval(EvalSpec(**common))
    cast = run_eval(EvalSpec(**common, dtype="bfloat16"))
    assert seen == [torch.float32, torch.bfloat16]
    assert cast[-1]["model"]["id"] == plain[0]["model"]["id"] + "-bfloat16"  # not resumed from fp32's records
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        EvalSpec(**common, dtype="float8").validate()


def test_eval_cli_takes_confidence_and_dtype(ckpt, tmp_path):
    out = tmp_path / "r.jsonl"
    assert main(["eval", "--model", str(ckpt), "--out", str(out), "--tasks", "add", "--limit", "1",
                 "--rule", "sdar_dynamic", "--confidence", "sampled_prob", "--dtype", "bfloat16",
                 "--max-new-tokens", "4", "--no-progress"]) == 0
    rec = [json.loads(line) for line in out.read_text().splitlines()][-1]
    assert rec["decode"]["rule"] == "sdar_dynamic" and rec["decode"]["confidence"] == "sampled_prob"
    assert rec["model"]["id"].endswith("-bfloat16")
