"""Record ids survive new decode knobs: an eval file written before a knob existed still resumes."""
from orl.engine.config import DecodeConfig
from orl.eval.records import LATER_KNOBS, config_id

# The decode dict of a record written before layout / confidence / cfg_scale / fused_commit and this
# session's knobs existed (runs/eval/shipped-base.jsonl, first record), with the id it stored.
OLD = {"block_len": 16, "max_new_tokens": 112, "rule": "threshold", "threshold": 0.9, "steps_per_block": 0,
       "factor": 1.0, "entropy_bound": 0.5, "residual": "off", "residual_temperature": 1.0, "temperature": 0.0,
       "seed": 0, "chunk_steps": 1, "eos_fill": True, "compile": False, "cuda_graph": False}
OLD_ID = "3ab0f13147cfdbe7"


def test_an_old_record_keeps_its_id_under_todays_config():
    assert config_id(OLD, 16) == OLD_ID
    assert config_id(DecodeConfig(**OLD, fused_commit=False).to_dict(), 16) == OLD_ID


def test_a_later_knob_enters_the_id_when_set():
    base = DecodeConfig(**OLD, fused_commit=False).to_dict()
    for knob, value in [("fused_commit", True), ("top_k", 5), ("top_p", 0.5), ("layout", "absolute_grid"),
                        ("stop", ["\n"])]:
        assert config_id({**base, knob: value}, 16) != OLD_ID, knob
    llada21 = {**base, "rule": "llada21"}
    assert config_id({**llada21, "editing_threshold": 0.7}, 16) != config_id(llada21, 16)
    assert config_id(base, 8) != OLD_ID  # batch size is part of the id


def test_every_decode_field_is_either_original_or_listed():
    # a field added without an entry in LATER_KNOBS would silently change every id again
    assert set(DecodeConfig.__dataclass_fields__) <= set(OLD) | set(LATER_KNOBS)


def test_a_knob_of_another_rule_stays_out_of_the_id():
    base = DecodeConfig(**OLD, fused_commit=False).to_dict()
    assert config_id({**base, "block_len": 4, "small_block_size": 4}, 16) == config_id({**base, "block_len": 4}, 16)
    assert config_id({**base, "rule": "fast_dllm_v2", "small_block_size": 4}, 16) != \
        config_id({**base, "rule": "fast_dllm_v2", "small_block_size": 8}, 16)


def test_the_default_sub_block_tiles_the_block():
    # nothing recorded or given: at most 8 (Fast-dLLM v2's), dividing the block
    for block, sub in [(32, 8), (16, 8), (4, 4), (12, 6), (7, 7)]:
        assert DecodeConfig.from_manifest({"block_len": block}).small_block_size == sub
    assert DecodeConfig.from_manifest({"block_len": 32, "sub_block_len": 4}).small_block_size == 4
    assert DecodeConfig.from_manifest({"block_len": 16}, block_len=4).small_block_size == 4
    assert DecodeConfig.from_manifest({"block_len": 4}, small_block_size=2).small_block_size == 2
