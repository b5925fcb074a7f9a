"""The TPF ceiling (orl.eval.metrics.pooled_tpf_ceiling): the fewest forwards any block decoder needs for the same
output, one denoising forward per block plus the commit forwards between blocks that the decode runs on their own.
It read "fused or not" off decode.fused_commit, but two decoders ignore that setting: rule fast_dllm_v2 never
fuses (a block's first token is read off the previous block's commit forward), and the full-sequence layout has
no commit forward at all. Their ceilings came out wrong (here 9.0 and 2.5 instead of 6.0 and 5.0)."""
import pytest

from orl.eval import metrics


def _rec(tokens, steps, commit, decode):
    return {"n_tokens": tokens, "block_steps": steps, "forwards": {"step": sum(steps), "commit": commit},
            "decode": decode}


def test_ceiling_of_a_fast_dllm_v2_record_counts_its_commit_forwards():
    # 18 tokens in 2 blocks, decoded with a commit forward between them (fast_dllm_v2 cannot fuse it, though the
    # record's fused_commit is the default True): at best 1 + 1 + 1 forwards -> 6.0
    rec = _rec(18, [3, 1], 1, {"rule": "fast_dllm_v2", "fused_commit": True})
    assert metrics.pooled_tpf_ceiling([rec]) == pytest.approx(18 / 3)


def test_ceiling_of_a_full_sequence_record_has_no_commit_forwards():
    # 10 tokens in 2 windows of the full-sequence layout: no commit forward, whatever fused_commit says -> 5.0
    rec = _rec(10, [2, 2], 0, {"rule": "threshold", "layout": "full_sequence", "fused_commit": False})
    assert metrics.pooled_tpf_ceiling([rec]) == pytest.approx(10 / 2)

