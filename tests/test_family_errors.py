"""Bad published checkpoints get one named error each, before any model is built (issue 18): every
unsupported option of a family's config.json at once, a tokenizer without a mask token when the config
has no mask id either, a shard the index lists but the directory lacks, tensors the layout does not have."""
import json
import re
import shutil

import pytest
from safetensors.torch import load_file, save_file

from family_fixtures import WRITERS
from orl.checkpoint import CheckpointError, load_checkpoint

pytest.importorskip("transformers")

BAD = {  # family -> (config changes, the words the one error must contain)
    "llada": ({"alibi": True, "include_bias": True, "block_type": "sequential", "scale_logits": True},
              ["alibi=True", "include_bias=True", "block_type='sequential'", "scale_logits=True"]),
    "dream": ({"hidden_act": "gelu", "use_sliding_window": True, "rope_scaling": {"type": "yarn", "factor": 4.0}},
              ["hidden_act='gelu'", "use_sliding_window=True", "'yarn'"]),
    "sdar": ({"attention_bias": True, "block_size": 0}, ["attention_bias=True", "block_size=0"]),
    "sdar_moe": ({"mlp_only_layers": [0], "hidden_act": "relu"}, ["mlp_only_layers=[0]", "hidden_act='relu'"]),
    "fast_dllm_v2": ({"bd_size": 12, "layer_types": ["sliding_attention", "full_attention"]},
                     ["bd_size=12", "layer_types="]),
    "llada2_moe": ({"score_function": "softmax", "use_bias": True, "norm_head": True, "rotary_dim": 16},
                   ["score_function='softmax'", "use_bias=True", "norm_head=True", "rotary_dim=16"]),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {name: write(root / name)[0] for name, write in WRITERS.items()}


def copy_with(src, dst, **changes):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("family", sorted(BAD))
def test_every_unsupported_option_named_at_once(written, tmp_path, family):
    changes, needles = BAD[family]
    d = copy_with(written[family], tmp_path / "bad", **changes)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    msg = str(e.value)
    assert "config.json" in msg and "unsupported" in msg
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_no_mask_token_anywhere_is_named(tmp_path):
    d, _ = WRITERS["sdar"](tmp_path / "sdar", mask_token=False)
    with pytest.raises(CheckpointError, match=r"no mask token.*'<\|MASK\|>'"):
        load_checkpoint(d)
    # a mask id in the config is enough (orl.tokenizer.resolve_special_ids), even without the token
    copy_with(d, tmp_path / "with_id", mask_token_id=258)
    _, tok, _ = load_checkpoint(tmp_path / "with_id")
    assert tok.mask_id == 258


def test_dream_without_mask_id_or_token_is_named(written, tmp_path):
    d = copy_with(written["dream"], tmp_path / "d", mask_token_id=None)
    tok_cfg = json.loads((d / "tokenizer_config.json").read_text())
    del tok_cfg["mask_token"]
    (d / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    tok_json = json.loads((d / "tokenizer.json").read_text())
    tok_json["added_tokens"] = [t for t in tok_json["added_tokens"] if t["content"] != "<|mask|>"]
    (d / "tokenizer.json").write_text(json.dumps(tok_json))
    with pytest.raises(CheckpointError, match="no mask token"):
        load_checkpoint(d)


def shard(d, names_in_second):
    """Split model.safetensors into two shards with an index, as large published checkpoints are."""
    tensors = load_file(str(d / "model.safetensors"))
    (d / "model.safetensors").unlink()
    second = {k: v for k, v in tensors.items() if k in names_in_second}
    first = {k: v for k, v in tensors.items() if k not in names_in_second}
    save_file(first, str(d / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    save_file(second, str(d / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    weight_map = {k: "model-00001-of-00002.safetensors" for k in first} | \
                 {k: "model-00002-of-00002.safetensors" for k in second}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def test_sharded_checkpoint_loads_and_a_missing_shard_is_named(written, tmp_path):
    d = copy_with(written["llada2_moe"], tmp_path / "sharded")
    shard(d, {n for n in load_file(str(d / "model.safetensors")) if ".layers.1." in n})
    model, _, _ = load_checkpoint(d)
    assert model.args.n_layers == 2
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors.*missing"):
        load_checkpoint(d)


def test_tensors_outside_the_layout_are_named(written, tmp_path):
    d = copy_with(written["llada"], tmp_path / "extra")
    tensors = load_file(str(d / "model.safetensors"))
    tensors["model.transformer.blocks.0.attn_norm.bias"] = tensors["model.transformer.blocks.0.attn_norm.weight"].clone()
    del tensors["model.transformer.blocks.1.up_proj.weight"]
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(d)
    msg = str(e.value)
    assert "missing tensor model.layers.1.mlp.up_proj.weight" in msg
    assert "unexpected tensor model.layers.0.input_layernorm.bias" in msg


def edit_json(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_a_tokenizer_id_past_the_embedding_is_named(written, tmp_path):
    """The count of tokens fits the embedding but one id does not (ids with a gap): before, it loaded and
    generate died with 'index out of range' (a device-side assert on a GPU)."""
    d = shutil.copytree(written["llada"], tmp_path / "llada")
    edit_json(d / "tokenizer.json", lambda t: t["model"]["vocab"].__setitem__("i", 5000))
    with pytest.raises(CheckpointError, match="the tokenizer's largest id is 5000, outside the model's embedding"):
        load_checkpoint(d)


@pytest.mark.parametrize("key, value, words", [
    ("eos_token", "<|not-a-token|>", "eos_token '<|not-a-token|>' is not in the vocabulary"),  # before: ignored
    ("eos_token", 5, "eos_token must be a token string, got 5"),  # before: TypeError naming no file
])
def test_tokenizer_config_specials_are_checked(written, tmp_path, key, value, words):
    d = shutil.copytree(written["llada"], tmp_path / "llada")
    edit_json(d / "tokenizer_config.json", lambda c: c.__setitem__(key, value))
    with pytest.raises(CheckpointError, match=re.escape(f"{d / 'tokenizer_config.json'}: {words}")):
        load_checkpoint(d)


@pytest.mark.parametrize("family, change, words", [
    ("dream", {"num_attention_heads": 0}, "config.json: "),  # before: ZeroDivisionError naming no file
    ("llada", {"n_heads": 0}, "config.json: "),
    ("sdar_moe", {"decoder_sparse_step": 0}, "moe_every must be > 0, got 0"),  # before: ZeroDivisionError at build
    ("dream", {"rope_scaling": "linear"}, "config.json: "),  # before: AttributeError
])
def test_config_values_that_once_crashed_are_named(written, tmp_path, family, change, words):
    d = copy_with(written[family], tmp_path / family, **change)
    with pytest.raises(CheckpointError, match=re.escape(words)):
        load_checkpoint(d)
