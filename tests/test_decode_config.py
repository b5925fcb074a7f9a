"""DecodeConfig: the checkpoint's decode defaults (from_manifest), derived sizes, and the loaded
model keeping its manifest."""
import pytest

from orl.checkpoint import save_checkpoint
from orl.engine import DecodeConfig, Engine
from orl.engine.ar import ARDecoder
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model


def test_from_manifest_defaults_and_overrides():
    m = {"block_len": 4, "residual_mode": "rcd"}
    cfg = DecodeConfig.from_manifest(m)
    assert (cfg.block_len, cfg.residual) == (4, "rcd")
    assert cfg.threshold == DecodeConfig.threshold and cfg.rule == "threshold"
    cfg = DecodeConfig.from_manifest(m, block_len=8, residual="off", threshold=0.7)
    assert (cfg.block_len, cfg.residual, cfg.threshold) == (8, "off", 0.7)
    # None keeps the default (flags not given on the command line)
    assert DecodeConfig.from_manifest(m, block_len=None, residual=None).block_len == 4


@pytest.mark.parametrize("manifest", [{}, {"block_len": None, "residual_mode": None}, {"source": "config.json"}])
def test_from_manifest_without_decode_fields_uses_the_class_defaults(manifest):
    cfg = DecodeConfig.from_manifest(manifest)
    assert (cfg.block_len, cfg.residual) == (DecodeConfig.block_len, DecodeConfig.residual)


def test_from_manifest_names_unknown_settings():
    with pytest.raises(ValueError, match="residual_mode"):
        DecodeConfig.from_manifest({}, residual_mode="rcd")  # the manifest's key, not the config's


@pytest.mark.parametrize("max_new,block_len,n_blocks", [(1, 8, 1), (8, 8, 1), (9, 8, 2), (64, 16, 4), (13, 4, 4)])
def test_n_blocks(max_new, block_len, n_blocks):
    assert DecodeConfig(block_len=block_len, max_new_tokens=max_new).n_blocks == n_blocks


def test_loaded_decoders_keep_their_manifest(tmp_path):
    tok = CharTokenizer()
    save_checkpoint(random_model(vocab_size=tok.vocab_size), tok, tmp_path / "ck",
                    manifest={"block_len": 4, "residual_mode": "adapter"})
    engine = Engine.from_checkpoint(tmp_path / "ck")
    assert (engine.manifest["block_len"], engine.manifest["residual_mode"]) == (4, "adapter")
    assert DecodeConfig.from_manifest(engine.manifest).residual == "adapter"
    assert Engine(engine.model, tok).manifest == {}                 # a bare model has none
    assert ARDecoder(engine.model, tok, manifest={"block_len": 4}).manifest == {"block_len": 4}


@pytest.mark.parametrize("knobs", [
    dict(alg_temp=float("nan"), rule="dream", layout="full_sequence"), dict(temperature=float("nan")),
    dict(temperature=float("inf")), dict(factor=float("nan")), dict(entropy_bound=float("nan")),
    dict(residual_temperature=float("nan")), dict(cfg_scale=float("nan"), layout="full_sequence"),
    dict(top_k=1 << 63), dict(max_post_steps=1 << 70), dict(seed=-(1 << 63) - 1)])
def test_non_finite_floats_and_ints_past_int64_are_refused_by_name(knobs):
    # NaN passes every range comparison (alg_temp NaN decoded as 0 before); a huge int failed in DeviceKnobs
    name = next(iter(knobs))
    with pytest.raises(ValueError, match=name):
        DecodeConfig(**knobs).validate()


def test_ar_config_refuses_a_nan_temperature():
    from orl.engine.ar import ARConfig
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        ARConfig(temperature=float("nan")).validate()


@pytest.mark.parametrize("knobs,words", [
    (dict(block_len="4"), "block_len must be of type int, got '4'"),
    (dict(small_block_size=2.0, rule="fast_dllm_v2"), "small_block_size must be of type int"),
    (dict(eos_fill=1), "eos_fill must be of type bool"), (dict(rule=None), "rule must be of type str"),
    (dict(top_k=True), "top_k must be of type int")])
def test_wrongly_typed_fields_are_named(knobs, words):
    # a manifest's "sub_block_len": "2" failed inside a comparison ("'<=' not supported between ...")
    with pytest.raises(ValueError, match=words):
        DecodeConfig(**knobs).validate()
    assert DecodeConfig(threshold=1, temperature=0).validate().threshold == 1  # an int is a float
