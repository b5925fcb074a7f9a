"""`orl generate --dtype`: the weights are cast at load (load_checkpoint's dtype), and a bad name exits 2
naming it before anything loads."""
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
