"""Checkpoints (DESIGN section 7): exact round trips, sharding, validation errors that name the
problem, atomic replacement, and `orl info`."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import orl.checkpoint as ckpt
from orl import cli
from orl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from orl.info import describe
from orl.model import ModelArgs, Transformer, masks
from orl.tokenizer import CharTokenizer, load_tokenizer

TOK = CharTokenizer()


def make_model(seed: int = 0, **kw) -> Transformer:
    base = dict(vocab_size=TOK.vocab_size, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                ffn_dim=48, max_seq_len=32)
    base.update(kw)
    torch.manual_seed(seed)
    model = Transformer(ModelArgs(**base)).eval()
    with torch.no_grad():  # the adapter's down projection starts at zero; make every tensor carry signal
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


def logits(model: Transformer) -> torch.Tensor:
    tokens = torch.randint(0, TOK.vocab_size, (2, 10), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(10).expand(2, 10)
    return model(tokens, pos, masks.causal(10).expand(2, 10, 10))


def assert_same(a: Transformer, b: Transformer) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k
    assert torch.equal(logits(a), logits(b))


FULL = dict(adapter_dim=16, learned_pos=True, n_experts=4, n_experts_per_tok=2, moe_ffn_dim=16, moe_every=2,
            shared_expert_ffn_dim=8, qk_norm=False, tie_embeddings=False, rotary_fraction=0.5)


@pytest.mark.parametrize("kw", [FULL, dict(tie_embeddings=True), dict(n_experts=4, moe_ffn_dim=16)])
def test_round_trip_is_exact(tmp_path, kw):
    model = make_model(**kw)
    save_checkpoint(model, TOK, tmp_path / "ck", {"block_len": 4, "residual_mode": "adapter", "recipe": {"lr": 1e-3}})
    loaded, tok, manifest = load_checkpoint(tmp_path / "ck")
    assert_same(model, loaded)
    assert loaded.args == model.args
    assert (manifest["block_len"], manifest["residual_mode"], manifest["recipe"]) == (4, "adapter", {"lr": 1e-3})
    assert (manifest["mask_id"], manifest["eos_id"], manifest["pad_id"]) == (2, 1, 0)
    assert manifest["format_version"] == 1 and manifest["quantization"] is None
    assert tok.encode("ab") == TOK.encode("ab")
    if model.args.tie_embeddings:
        assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
        assert "lm_head.weight" not in load_file(tmp_path / "ck" / "model.safetensors")


def test_config_json_is_qwen3_compatible(tmp_path):
    save_checkpoint(make_model(n_experts=4, moe_ffn_dim=16), TOK, tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"] and cfg["model_type"] == "qwen3_moe"
    assert (cfg["num_experts"], cfg["moe_intermediate_size"], cfg["head_dim"], cfg["dtype"]) == (4, 16, 8, "float32")
    assert json.loads((tmp_path / "ck" / "orl.json").read_text())["family"] == "qwen3_moe"


def test_bf16_round_trip_and_load_dtype(tmp_path):
    model = make_model().to(torch.bfloat16)
    save_checkpoint(model, TOK, tmp_path / "ck")
    loaded, _, manifest = load_checkpoint(tmp_path / "ck")
    assert manifest["dtype"] == "bfloat16" and loaded.lm_head.weight.dtype == torch.bfloat16
    assert_same(model, loaded)
    as_fp32, _, _ = load_checkpoint(tmp_path / "ck", dtype=torch.float32)
    assert as_fp32.lm_head.weight.dtype == torch.float32


def test_sharded_round_trip(tmp_path):
    model = make_model(**FULL)
    save_checkpoint(model, TOK, tmp_path / "ck", max_shard_bytes=20_000)
    d = tmp_path / "ck"
    shards = sorted(p.name for p in d.glob("model-*.safetensors"))
    assert len(shards) > 2 and not (d / "model.safetensors").exists()
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    assert all(n.endswith(f"-of-{len(shards):05d}.safetensors") for n in shards)
    loaded, _, _ = load_checkpoint(d)
    assert_same(model, loaded)


def test_parameter_count_in_describe(tmp_path):
    model = make_model(**FULL)
    save_checkpoint(model, TOK, tmp_path / "ck")
    assert f"{model.num_params():,}" in describe(tmp_path / "ck")


# ---------------------------------------------------------------- errors that name the problem

@pytest.fixture
def saved(tmp_path) -> Path:
    save_checkpoint(make_model(), TOK, tmp_path / "ck")
    return tmp_path / "ck"


def rewrite_weights(d: Path, edit, record_checksum: bool = True) -> None:
    """Edit the weights; by default also re-record their checksum, to reach the checks behind it."""
    tensors = load_file(d / "model.safetensors")
    edit(tensors)
    save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    if record_checksum:
        rerecord(d, "model.safetensors")


def rerecord(d: Path, name: str) -> None:
    from orl.atomic_dir import file_digest

    m = json.loads((d / "orl.json").read_text())
    m["files"][name] = file_digest(d / name)
    (d / "orl.json").write_text(json.dumps(m))


def load_error(path) -> str:
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    return str(e.value)


def test_missing_and_unexpected_tensors_are_all_named(saved):
    rewrite_weights(saved, lambda t: (t.pop("model.layers.1.mlp.up_proj.weight"),
                                      t.pop("model.norm.weight"), t.update(extra=torch.zeros(2))))
    msg = load_error(saved)
    assert "missing tensor model.layers.1.mlp.up_proj.weight" in msg
    assert "missing tensor model.norm.weight" in msg
    assert "unexpected tensor extra" in msg


def test_wrong_shape_and_dtype_are_named_together(saved):
    def edit(t):
        t["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(31, 32)
        t["model.layers.0.input_layernorm.weight"] = t["model.layers.0.input_layernorm.weight"].half()
    rewrite_weights(saved, edit)
    msg = load_error(saved)
    assert "shape mismatch model.layers.0.self_attn.q_proj.weight: checkpoint [31, 32], model expects [32, 32]" in msg
    assert "dtype mismatch model.layers.0.input_layernorm.weight: checkpoint torch.float16" in msg
    assert "2 problem(s)" in msg


def test_truncated_file_is_named(saved):
    f = saved / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_checkpoint(saved)


def test_missing_shard_is_named(tmp_path):
    d = tmp_path / "ck"
    save_checkpoint(make_model(), TOK, d, max_shard_bytes=20_000)
    shard = sorted(d.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(CheckpointError, match=f"{shard.name} listed in model.safetensors.index.json is missing"):
        load_checkpoint(d)


def test_unknown_format_version_is_named(saved):
    m = json.loads((saved / "orl.json").read_text())
    m["format_version"] = 7
    (saved / "orl.json").write_text(json.dumps(m))
    with pytest.raises(CheckpointError, match="unsupported format_version 7"):
        load_checkpoint(saved)


def test_manifest_cannot_contradict_the_model(tmp_path):
    with pytest.raises(ValueError, match="'dtype'"):
        save_checkpoint(make_model(), TOK, tmp_path / "ck", {"dtype": "bfloat16"})


# ---------------------------------------------------------------- atomic writes

def test_failed_save_leaves_previous_checkpoint_intact(saved, monkeypatch):
    before = {p.name: p.read_bytes() for p in saved.iterdir()}

    def crash(*a, **k):
        raise RuntimeError("disk full")
    monkeypatch.setattr(ckpt, "_write_json", crash)  # weights are already written when this fires
    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(make_model(seed=1), TOK, saved)
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == before
    assert [p.name for p in saved.parent.iterdir()] == ["ck"]  # no temp or set-aside directory left
    monkeypatch.undo()
    loaded, _, _ = load_checkpoint(saved)
    assert_same(make_model(), loaded)


def test_save_replaces_existing_checkpoint(saved):
    save_checkpoint(make_model(seed=1), TOK, saved)
    loaded, _, _ = load_checkpoint(saved)
    assert_same(make_model(seed=1), loaded)
    assert [p.name for p in saved.parent.iterdir()] == ["ck"]


def test_save_refuses_to_replace_a_non_checkpoint_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("precious")
    with pytest.raises(ValueError, match=r"entries orl did not write \(notes.txt\)"):
        save_checkpoint(make_model(), TOK, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "precious"


# ---------------------------------------------------------------- orl info

def run_info(d: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orl.cli", "info", str(d)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], timeout=120)


def test_orl_info_prints_parameter_count(saved):
    r = run_info(saved)
    assert r.returncode == 0, r.stderr
    assert f"{make_model().num_params():,}" in r.stdout
    assert "model.safetensors" in r.stdout and "family         qwen3" in r.stdout


def test_orl_info_on_bad_directory_exits_2(tmp_path, capsys):
    r = run_info(tmp_path)
    assert r.returncode == 2
    assert "is not a checkpoint" in r.stderr and str(tmp_path) in r.stderr
    assert cli.main(["info", str(tmp_path / "nope")]) == 2  # in-process: a second interpreter costs seconds
    assert "does not exist" in capsys.readouterr().err


def test_hf_tokenizer_checkpoint_with_mask_id_from_manifest(tmp_path):
    from test_tokenizer import write_hf_tokenizer

    (tmp_path / "tok").mkdir()
    write_hf_tokenizer(tmp_path / "tok", mask=False)
    hf_tok = load_tokenizer(tmp_path / "tok")
    assert hf_tok.mask_id is None
    model = make_model(vocab_size=320)
    save_checkpoint(model, hf_tok, tmp_path / "ck", {"mask_id": 7})  # a base LM's reserved token
    loaded, tok, manifest = load_checkpoint(tmp_path / "ck")
    assert (tok.mask_id, tok.eos_id, tok.pad_id) == (7, hf_tok.eos_id, hf_tok.pad_id) == (manifest["mask_id"], 0, 1)
    assert tok.encode("hello world") == hf_tok.encode("hello world")
    assert_same(model, loaded)


def test_save_refuses_to_replace_a_file(tmp_path):
    (tmp_path / "ck").write_text("precious")
    with pytest.raises(ValueError, match="it is a file, not a directory"):
        save_checkpoint(make_model(), TOK, tmp_path / "ck")
    assert (tmp_path / "ck").read_text() == "precious"


def test_tokenizer_larger_than_embedding_is_named(tmp_path):
    save_checkpoint(make_model(), TOK, tmp_path / "ck")
    CharTokenizer(TOK.chars + "éü").save(tmp_path / "ck")
    rerecord(tmp_path / "ck", "orl_tokenizer.json")
    with pytest.raises(CheckpointError, match="tokenizer has 101 tokens, the model's embedding only 99"):
        load_checkpoint(tmp_path / "ck")


def test_redundant_tied_head_loads_only_when_it_is_the_embedding(saved):
    rewrite_weights(saved, lambda t: t.update({"lm_head.weight": t["model.embed_tokens.weight"].clone()}))
    assert_same(make_model(), load_checkpoint(saved)[0])
    rewrite_weights(saved, lambda t: t.update({"lm_head.weight": torch.zeros_like(t["model.embed_tokens.weight"])}))
    with pytest.raises(CheckpointError, match="unexpected tensor lm_head.weight"):
        load_checkpoint(saved)
