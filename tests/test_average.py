"""orl.average / `orl average`: the weighted mean of checkpoints of one model, refused across models."""
import json

import pytest
import torch

from orl import cli
from orl.average import AverageError, accumulate, average_checkpoints, normalized_weights
from orl.checkpoint import load_checkpoint, save_checkpoint
from orl.model import ModelArgs, Transformer
from orl.quant import quantize
from orl.tokenizer import CharTokenizer

TOK = CharTokenizer()
pytestmark = pytest.mark.usefixtures("one_thread")
MANIFEST = {"block_len": 4, "objective": "autoregressive"}


def tiny(seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    args = dict(vocab_size=TOK.vocab_size, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=48,
                max_seq_len=64)
    return Transformer(ModelArgs(**{**args, **kw})).eval()


def ckpt(root, name, seed, step=None, **kw):
    recipe = {"name": "pretrain", "step": step, "config": {"tasks": ["long7xp"]}}
    return save_checkpoint(tiny(seed, **kw), TOK, root / name, manifest={**MANIFEST, "recipe": recipe})


def copy_of(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def logits(model: Transformer) -> torch.Tensor:
    tokens = torch.randint(3, TOK.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        return model(tokens, torch.arange(12).expand(2, 12), torch.ones(2, 12, 12, dtype=torch.bool))


# ---------------------------------------------------------------- pure functions, hand-computed

def test_weights_are_normalised_and_checked():
    assert normalized_weights(4, None) == [0.25] * 4
    assert normalized_weights(2, [1.0, 3.0]) == [0.25, 0.75]
    for n, w, msg in [(1, None, "at least 2"), (2, [1.0], "1 weights for 2"), (2, [1.0, 0.0], "> 0"),
                      (2, [1.0, float("nan")], "> 0"), (2, [1.0, -2.0], "> 0")]:
        with pytest.raises(AverageError, match=msg):
            normalized_weights(n, w)


def test_accumulate_weighs_floats_and_keeps_equal_integers():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor([3])}
    b = {"w": torch.tensor([5.0, 10.0]), "n": torch.tensor([3])}
    total = accumulate(accumulate(None, a, 0.25, "a"), b, 0.75, "b")
    assert torch.equal(total["w"], torch.tensor([4.0, 8.0], dtype=torch.float64)) and total["n"].item() == 3
    assert torch.equal(a["w"], torch.tensor([1.0, 2.0]))  # the inputs are not modified
    with pytest.raises(AverageError, match="integer tensor n differs"):
        accumulate(accumulate(None, a, 0.5, "a"), {**b, "n": torch.tensor([4])}, 0.5, "b")
    with pytest.raises(AverageError, match="b: w has shape"):
        accumulate(accumulate(None, a, 0.5, "a"), {**b, "w": torch.zeros(3)}, 0.5, "b")
    with pytest.raises(AverageError, match="names differ"):
        accumulate(accumulate(None, a, 0.5, "a"), {"w": b["w"]}, 0.5, "b")


# ---------------------------------------------------------------- checkpoints

def test_average_is_the_weighted_mean_of_every_tensor(tmp_path):
    a, b, c = (ckpt(tmp_path, f"run-at{s}", seed=s, step=s) for s in (1, 2, 3))
    out = average_checkpoints([a, b, c], tmp_path / "avg", weights=[1, 1, 2])
    avg, tok, manifest = load_checkpoint(out)
    states = [load_checkpoint(p)[0].state_dict() for p in (a, b, c)]
    for k, v in avg.state_dict().items():
        expected = 0.25 * states[0][k].double() + 0.25 * states[1][k].double() + 0.5 * states[2][k].double()
        assert torch.allclose(v.double(), expected, atol=1e-7), k
    assert avg.lm_head.weight is avg.model.embed_tokens.weight  # the tie survives
    assert [s["weight"] for s in manifest["averaged_from"]] == [0.25, 0.25, 0.5]
    assert [s["step"] for s in manifest["averaged_from"]] == [1, 2, 3]
    assert manifest["averaged_from"][2]["files"] == json.loads((c / "orl.json").read_text())["files"]
    assert manifest["objective"] == "autoregressive" and manifest["block_len"] == 4
    assert manifest["recipe"] == {"name": "average", "config": {"tasks": ["long7xp"]}}  # for `orl tasks`


def test_the_average_of_x_plus_d_and_x_minus_d_is_x(tmp_path):
    x, d = tiny(5), tiny(6)
    plus, minus = tiny(5), tiny(5)
    with torch.no_grad():
        for (name, p), q, r in zip(plus.named_parameters(), minus.parameters(), d.parameters()):
            p.add_(0.5 * r)
            q.sub_(0.5 * r)
    a = save_checkpoint(plus, TOK, tmp_path / "a", manifest=MANIFEST)
    b = save_checkpoint(minus, TOK, tmp_path / "b", manifest=MANIFEST)
    out = average_checkpoints([a, b], tmp_path / "avg")
    assert torch.allclose(logits(load_checkpoint(out)[0]), logits(x), atol=1e-5)


def test_decode_fields_and_defining_files_are_kept_and_must_agree(tmp_path):
    decode = {**MANIFEST, "objective": "block_diffusion", "layout": "absolute_grid", "sub_block_len": 2, "eos_ids": [1, 7]}
    a = save_checkpoint(tiny(0), TOK, tmp_path / "a", manifest=decode)
    b = save_checkpoint(tiny(1), TOK, tmp_path / "b", manifest=decode)
    for d in (a, b):  # a file save_checkpoint does not write itself
        (d / "generation_config.json").write_text('{"eos_token_id": [1, 7]}')
    out = average_checkpoints([a, b], tmp_path / "avg")
    m = json.loads((out / "orl.json").read_text())
    assert {k: m[k] for k in ("layout", "sub_block_len", "eos_ids", "objective")} == {
        "layout": "absolute_grid", "sub_block_len": 2, "eos_ids": [1, 7], "objective": "block_diffusion"}
    assert (out / "generation_config.json").read_text() == '{"eos_token_id": [1, 7]}'
    assert (out / "config.json").read_bytes() == (a / "config.json").read_bytes()
    load_checkpoint(out)  # the copied files are covered by the manifest's checksums
    c = save_checkpoint(tiny(2), TOK, tmp_path / "c", manifest={**decode, "layout": "prompt_block"})
    (c / "generation_config.json").write_text('{"eos_token_id": [1, 7]}')
    with pytest.raises(AverageError, match="in layout"):
        average_checkpoints([a, c], tmp_path / "avg2")
    (b / "generation_config.json").write_text('{"eos_token_id": [1]}')
    with pytest.raises(AverageError, match="generation_config.json"):
        average_checkpoints([a, b], tmp_path / "avg2")


def test_the_recipe_is_no_run_of_its_inputs(tmp_path):
    a = ckpt(tmp_path, "run-at200", 0, step=200)
    b = ckpt(tmp_path, "run-at100", 1, step=100)
    orl = save_checkpoint(tiny(2), TOK, tmp_path / "orl", manifest={**MANIFEST, "recipe": {
        "name": "orl", "update": 40, "config": {"tasks": ["sort"]}}})
    m = json.loads((average_checkpoints([a, b], tmp_path / "avg") / "orl.json").read_text())
    assert m["recipe"] == {"name": "average", "config": {"tasks": ["long7xp"]}}
    assert [s["step"] for s in m["averaged_from"]] == [200, 100]
    m = json.loads((average_checkpoints([a, orl], tmp_path / "avg2") / "orl.json").read_text())
    assert m["recipe"]["config"]["tasks"] == [] and m["averaged_from"][1]["step"] == 40  # ORL counts updates


def test_other_models_and_bad_inputs_are_refused_before_anything_is_written(tmp_path):
    a, b = ckpt(tmp_path, "a", 0), ckpt(tmp_path, "b", 1)
    cases = [
        ([a, ckpt(tmp_path, "wide", 2, ffn_dim=64)], "differs from .* in model_args"),
        ([a, save_checkpoint(tiny(3), TOK, tmp_path / "diff", manifest={**MANIFEST, "objective": "block_diffusion"})],
         "in objective"),
        ([a, a], "given twice"),
        ([a, copy_of(a, tmp_path / "a-copy")], "holds the same files as"),
        ([a], "at least 2"),
    ]
    q = tmp_path / "q"
    save_checkpoint(quantize(tiny(4), "int8"), TOK, q, manifest=MANIFEST)
    cases.append(([a, q], "is quantized"))
    for dirs, msg in cases:
        with pytest.raises(AverageError, match=msg):
            average_checkpoints(dirs, tmp_path / "out")
        assert not (tmp_path / "out").exists()
    tok_file = b / "orl_tokenizer.json"
    data = json.loads(tok_file.read_text())
    tok_file.write_text(json.dumps({**data, "extra": 1}))
    with pytest.raises(AverageError, match="orl_tokenizer.json"):
        average_checkpoints([a, b], tmp_path / "out")
    with pytest.raises(AverageError, match="is, holds or lies inside the input"):
        average_checkpoints([a, ckpt(tmp_path, "c", 2)], a)


def test_a_bad_out_is_refused_before_any_weight_is_read(tmp_path, monkeypatch):
    import orl.checkpoint

    a, b = ckpt(tmp_path, "run-at100", 0, step=100), ckpt(tmp_path, "b", 1)
    loads = []
    monkeypatch.setattr(orl.checkpoint, "load_checkpoint", lambda *x, **k: loads.append(x) or 1 / 0)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="entries orl did not write"):
        average_checkpoints([a, b], foreign)
    run = tmp_path / "run"
    save_checkpoint(tiny(3), TOK, run, extra_files={"trainer_state.pt": b"x"})
    with pytest.raises(AverageError, match="holds a training run"):
        average_checkpoints([a, b], run)
    with pytest.raises(AverageError, match="is, holds or lies inside the input"):
        average_checkpoints([a, b], a / "inside")
    assert loads == [] and (foreign / "notes.txt").read_text() == "mine"
    with pytest.raises(AverageError, match="overflows"):
        normalized_weights(2, [1e308, 1e308])


def test_cli_average(tmp_path, capsys):
    a, b = ckpt(tmp_path, "a", 0, step=10), ckpt(tmp_path, "b", 1, step=20)
    assert cli.main(["average", str(a), str(b), "--out", str(tmp_path / "avg"), "--weights", "3,1"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "avg")
    sa, sb = load_checkpoint(a)[0].state_dict(), load_checkpoint(b)[0].state_dict()
    w = load_checkpoint(tmp_path / "avg")[0].state_dict()["model.layers.0.mlp.down_proj.weight"]
    k = "model.layers.0.mlp.down_proj.weight"
    assert torch.allclose(w, 0.75 * sa[k] + 0.25 * sb[k], atol=1e-7)
    assert cli.main(["average", str(a), str(b), "--out", str(tmp_path / "x"), "--weights", "1,-1"]) == 2
    assert "weights must be finite and > 0" in capsys.readouterr().err and not (tmp_path / "x").exists()
    with pytest.raises(SystemExit):
        cli.main(["average", str(a), str(b), "--out", str(tmp_path / "x"), "--weights", "1,a"])
    assert "comma-separated numbers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["average", str(a), str(b), "--out", str(tmp_path / "x"), "--weights", "1_0,1"])


def test_plain_hugging_face_inputs_average_with_their_generation_defaults(tmp_path):
    dirs = []
    for i in range(2):  # a Hugging Face layout: no orl.json, the EOS ids in generation_config.json
        d = save_checkpoint(tiny(i), TOK, tmp_path / f"hf{i}")
        (d / "orl.json").unlink()
        (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 7]}))
        dirs.append(d)
    out = average_checkpoints(dirs, tmp_path / "avg")
    model, tok, manifest = load_checkpoint(out)
    assert tok.eos_ids == load_checkpoint(dirs[0])[1].eos_ids == (1, 7)
    assert "source" not in manifest or manifest["source"] != "config.json"
