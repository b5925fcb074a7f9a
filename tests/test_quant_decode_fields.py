"""`orl quantize` keeps how its source decodes: a quantized copy of an absolute_grid checkpoint (or of a
published dLLM read from its config.json) must decode with the same layout, sub-block, EOS ids and mask token,
not with the engine's defaults."""
import warnings
from pathlib import Path

import pytest

from family_fixtures import special_id, write_fast_dllm_v2
from orl.checkpoint import load_checkpoint, read_manifest
from orl.cli_quant import quantize_checkpoint
from orl.engine.config import DecodeConfig

CK = Path(__file__).resolve().parents[1] / "checkpoints"
pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_quantized_absolute_grid_checkpoint_keeps_its_layout(tmp_path):
    src = CK / "orl-tiny7-base"
    assert read_manifest(src)["layout"] == "absolute_grid"  # what the shipped checkpoint trained with
    quantize_checkpoint(str(src), "int8", str(tmp_path / "q"))
    got = read_manifest(tmp_path / "q")
    assert got.get("layout") == "absolute_grid"
    # what every command decodes with: the source's grid, not DecodeConfig's default prompt_block
    assert DecodeConfig.from_manifest(got).layout == DecodeConfig.from_manifest(read_manifest(src)).layout


def test_a_quantized_published_dllm_keeps_its_decode_fields(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_fast_dllm_v2(tmp_path / "hf")  # config.json only: its decode fields come from the family's reader
    src = read_manifest(tmp_path / "hf")
    assert src["layout"] == "absolute_grid" and src["sub_block_len"] == 8 and src["eos_ids"]
    quantize_checkpoint(str(tmp_path / "hf"), "fp8", str(tmp_path / "q"))
    got = read_manifest(tmp_path / "q")
    for key in ("layout", "sub_block_len", "eos_ids", "mask_token", "block_len", "objective"):
        assert got.get(key) == src[key], key
    assert DecodeConfig.from_manifest(got) == DecodeConfig.from_manifest(src)
    # decoding stops where the source's does: config.json's <|endoftext|> as well as the end-of-turn token
    stops = set(load_checkpoint(tmp_path / "q")[1].eos_ids)
    assert stops == set(load_checkpoint(tmp_path / "hf")[1].eos_ids)
    assert {special_id("fast_dllm_v2", "<|endoftext|>"), special_id("fast_dllm_v2", "<|im_end|>")} <= stops
