"""A quantized checkpoint's config.json: transformers would read its int8 / float8 storage as plain weights (logging
the scales as unexpected, then computing garbage), so its model_type is one transformers does not know and it
refuses the directory; orl reads it (and quantized checkpoints written before, with the family's model_type)."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.checkpoint_checks import QUANTIZED_MODEL_TYPE, CheckpointError
from orl.cli_quant import quantize_checkpoint

AR = Path(__file__).resolve().parent.parent / "checkpoints" / "orl-tiny7-ar"
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    out = tmp_path_factory.mktemp("q") / "int8"
    quantize_checkpoint(str(AR), "int8", str(out))
    return out


def test_transformers_refuses_a_quantized_checkpoint(quantized):
    transformers = pytest.importorskip("transformers")
    assert json.loads((quantized / "config.json").read_text())["model_type"] == QUANTIZED_MODEL_TYPE
    with pytest.raises((ValueError, KeyError), match=QUANTIZED_MODEL_TYPE):
        transformers.AutoModelForCausalLM.from_pretrained(quantized)


def test_orl_reads_it_and_an_older_one_with_the_family_model_type(quantized, tmp_path):
    model, _, manifest = load_checkpoint(quantized)
    assert manifest["quantization"]
    older = tmp_path / "older"
    shutil.copytree(quantized, older)
    cfg = json.loads((older / "config.json").read_text())
    cfg["model_type"] = "qwen3"  # as written before: the manifest's checksum of config.json no longer holds
    (older / "config.json").write_text(json.dumps(cfg))
    man = json.loads((older / "orl.json").read_text())
    man["files"].pop("config.json")
    (older / "orl.json").write_text(json.dumps(man))
    again, _, _ = load_checkpoint(older)
    a, b = again.state_dict(), model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_unquantized_checkpoint_cannot_claim_the_quantized_model_type(tmp_path):
    d = tmp_path / "ar"
    shutil.copytree(AR, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = QUANTIZED_MODEL_TYPE
    (d / "config.json").write_text(json.dumps(cfg))
    man = json.loads((d / "orl.json").read_text())
    man["files"].pop("config.json")
    (d / "orl.json").write_text(json.dumps(man))
    with pytest.raises(CheckpointError, match="model_type"):
        load_checkpoint(d)
