"""Where a plain HF directory's EOS ids come from (orl.checkpoint): config.json's eos_token_id, then
generation_config.json's (transformers' generate stops at those), then the family's end-of-turn token
(Gemma 3's <end_of_turn>, also for a manifest that does not list it, as a GGUF import's does not)."""
import json

import pytest
import transformers

from family_fixtures import SIZES, write_tokenizer
from orl.checkpoint import CheckpointError, load_checkpoint

SPECIALS = ["<pad>", "<eos>", "<bos>", "<end_of_turn>", "<mask>", "<unused0>"]  # ids 256..261


def gemma_dir(d, generation_config=None):
    cfg = transformers.Gemma3TextConfig(**{**SIZES, "head_dim": 8, "num_hidden_layers": 2},
                                        eos_token_id=257, pad_token_id=256, bos_token_id=258)
    transformers.Gemma3ForCausalLM(cfg).save_pretrained(d)
    (d / "generation_config.json").unlink(missing_ok=True)  # save_pretrained writes one from the config
    if generation_config is not None:
        (d / "generation_config.json").write_text(json.dumps(generation_config))
    write_tokenizer(d, SPECIALS, "<eos>")
    return d


def test_generation_config_eos_ids_are_read(tmp_path):
    """Google's gemma-3 generation_config.json says [1, 106]; here a stop id only it names (261)."""
    _, tok, manifest = load_checkpoint(gemma_dir(tmp_path, {"eos_token_id": [257, 261]}))
    assert tok.eos_id == 257 and tok.eos_ids == (257, 261, 259)


def test_family_end_of_turn_without_generation_config(tmp_path):
    _, tok, manifest = load_checkpoint(gemma_dir(tmp_path))
    assert tok.eos_ids == (257, 259)  # <eos> from the tokenizer, <end_of_turn> from the family
    assert "<end_of_turn>" in manifest["eos_tokens"]


def test_family_end_of_turn_in_an_orl_manifest(tmp_path):
    """An orl.json without eos_tokens (the GGUF import writes none) still stops at <end_of_turn>."""
    d = gemma_dir(tmp_path / "hf")
    model, tok, _ = load_checkpoint(d)
    from orl.checkpoint import save_checkpoint
    save_checkpoint(model, tok, tmp_path / "orl", manifest={"objective": "autoregressive"})
    man = json.loads((tmp_path / "orl" / "orl.json").read_text())
    man.pop("eos_tokens", None), man.pop("eos_ids", None)
    (tmp_path / "orl" / "orl.json").write_text(json.dumps(man))
    _, tok2, _ = load_checkpoint(tmp_path / "orl")
    assert 259 in tok2.eos_ids


@pytest.mark.parametrize("bad, says", [({"eos_token_id": "x"}, "generation_config.json"),
                                       ([1, 2], "generation_config.json must hold a JSON object")])
def test_bad_generation_config_is_named(tmp_path, bad, says):
    d = gemma_dir(tmp_path)
    (d / "generation_config.json").write_text(json.dumps(bad))
    with pytest.raises(CheckpointError, match=says):
        load_checkpoint(d)


def test_generation_config_eos_outside_the_vocabulary_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="outside the model vocabulary"):
        load_checkpoint(gemma_dir(tmp_path, {"eos_token_id": [257, 99999]}))
