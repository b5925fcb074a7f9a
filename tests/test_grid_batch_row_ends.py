"""Absolute grid, batched: rows whose prompt tails differ end their answers in different blocks. A row whose
answer (max_new_tokens) ended in an earlier block takes no part in the later blocks, so its counts must be
those of the same row decoded alone: no extra (empty) block in block_steps, no commit forward counted after
its own last block (DESIGN section 5: forwards of the row), and its finishing time at its own last block."""
import pytest

from orl.engine import DecodeConfig, Engine
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def engine():
    return Engine(random_model(vocab_size=TOK.vocab_size, eos_bias=-1e4), TOK)  # never stops at EOS


@pytest.mark.parametrize("fused", [True, False])
def test_a_row_whose_answer_ended_in_an_earlier_block_counts_only_its_own_blocks(engine, fused):
    # L = 4, 3 new tokens: "abc" (tail 3) answers in blocks 0 and 1 (1 + 2 positions); "abcd" (tail 0) in
    # block 0 only (3 positions), so alone it takes one block and, being its last, no commit forward
    cfg = DecodeConfig(block_len=4, max_new_tokens=3, layout="absolute_grid", threshold=0.5, fused_commit=fused)
    long_, short = engine.generate(["abc", "abcd"], cfg, seeds=[0, 1])
    alone = engine.generate(["abcd"], cfg, seeds=[1])[0]
    assert long_.n_tokens == short.n_tokens == 3 and not short.finished
    assert len(long_.block_steps) == 2
    assert len(short.block_steps) == 1  # its one block, not [steps, 0]
    assert short.commit_forwards == 0   # no commit forward after its own last block
    assert (short.token_ids, short.block_steps, short.step_forwards, short.commit_forwards) == \
           (alone.token_ids, alone.block_steps, alone.step_forwards, alone.commit_forwards)
    assert short.total_s < long_.total_s  # done at its own last block, not the batch's
