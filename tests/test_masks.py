"""The one mask builder (orl.model.masks) against hand-written matrices and an independent
implementation of the BD3-LM / SDAR training mask."""
import pytest
import torch

from orl.model import masks


def m(rows):
    """Literal 0/1 rows -> bool tensor, so expected matrices read like the paper figures."""
    return torch.tensor(rows, dtype=torch.bool)


def test_causal_is_lower_triangular():
    assert torch.equal(masks.causal(4), m([
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [1, 1, 1, 0],
        [1, 1, 1, 1],
    ]))


def test_causal_with_left_padding_hides_pad_keys():
    # row 0 is left-padded by one token: nobody may attend to key 0 of that row
    valid = m([[0, 1, 1], [1, 1, 1]])
    out = masks.causal(3, valid)
    assert out.shape == (2, 3, 3)
    assert torch.equal(out[0], m([
        [0, 0, 0],
        [0, 1, 0],
        [0, 1, 1],
    ]))
    assert torch.equal(out[1], m([
        [1, 0, 0],
        [1, 1, 0],
        [1, 1, 1],
    ]))


def test_bidirectional_with_padding():
    assert torch.equal(masks.bidirectional(3), torch.ones(3, 3, dtype=torch.bool))
    valid = m([[1, 1, 0]])
    assert torch.equal(masks.bidirectional(3, valid)[0], m([
        [1, 1, 0],
        [1, 1, 0],
        [1, 1, 0],
    ]))


def test_block_ids_and_bad_block_len():
    assert masks.block_ids(2, 5, 2).tolist() == [0, 0, 1, 1, 2, 2, 3]
    with pytest.raises(ValueError, match="block_len"):
        masks.block_ids(2, 4, 0)


def test_block_causal_prompt2_answer4_block2():
    # prompt is block 0 (bidirectional inside), then two answer blocks of 2
    assert torch.equal(masks.block_causal(2, 4, 2), m([
        [1, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 1, 1],
    ]))


def test_staircase_prompt1_answer4_block2():
    meta, mask = masks.staircase(1, 4, 2, noisy_blocks=[0, 1])
    # row: clean [p, a0, a1, a2, a3], noisy copy of answer block 0 [a0, a1], noisy copy of block 1 [a2, a3]
    assert meta["block"].tolist() == [0, 1, 1, 2, 2, 1, 1, 2, 2]
    assert meta["state"].tolist() == [0, 0, 0, 0, 0, 1, 1, 2, 2]
    # a noisy copy keeps the RoPE position of the clean token it copies
    assert meta["pos"].tolist() == [0, 1, 2, 3, 4, 1, 2, 3, 4]
    assert meta["src"].tolist() == [0, 1, 2, 3, 4, 1, 2, 3, 4]
    assert torch.equal(mask, m([
        # p  a0 a1 a2 a3 n0 n0 n1 n1
        [1, 0, 0, 0, 0, 0, 0, 0, 0],  # p
        [1, 1, 1, 0, 0, 0, 0, 0, 0],  # a0
        [1, 1, 1, 0, 0, 0, 0, 0, 0],  # a1
        [1, 1, 1, 1, 1, 0, 0, 0, 0],  # a2
        [1, 1, 1, 1, 1, 0, 0, 0, 0],  # a3
        [1, 0, 0, 0, 0, 1, 1, 0, 0],  # noisy block 0: prompt + itself, never its clean answer
        [1, 0, 0, 0, 0, 1, 1, 0, 0],
        [1, 1, 1, 0, 0, 0, 0, 1, 1],  # noisy block 1: clean block 0, itself, not the other noisy state
        [1, 1, 1, 0, 0, 0, 0, 1, 1],
    ]))


def test_predecessors_read_a_blocks_first_token_off_the_clean_copy():
    meta, _ = masks.staircase(1, 4, 2, noisy_blocks=[0, 1, 1])
    # row: clean [p a0 a1 a2 a3] | n0 [a0 a1] | n1 [a2 a3] | n1' [a2 a3]
    # each noisy state's first token follows the clean position before it (p for a0, a1 for a2);
    # the other tokens follow the row token before them
    assert meta["read_from"].tolist() == [0, 0, 1, 2, 3, 0, 5, 2, 7, 2, 9]
    assert masks.predecessors(torch.tensor([0, 0, 1, 1, 2]), torch.tensor([0, 1, 1, 2, 1])).tolist() == [0, 0, 0, 2, 0]


def test_staircase_repeated_block_states_do_not_see_each_other():
    # two noisy states of the same block (e.g. two denoising steps replayed) are separate states
    meta, mask = masks.staircase(0, 2, 2, noisy_blocks=[0, 0])
    assert meta["state"].tolist() == [0, 0, 1, 1, 2, 2]
    assert meta["pos"].tolist() == [0, 1, 0, 1, 0, 1]
    assert torch.equal(mask, m([
        [1, 1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [0, 0, 1, 1, 0, 0],
        [0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 1],
        [0, 0, 0, 0, 1, 1],
    ]))


def test_staircase_rejects_out_of_range_block():
    with pytest.raises(ValueError, match="noisy block 2"):
        masks.staircase_layout(1, 4, 2, noisy_blocks=[2])


def bd3lm_mask(block_of: list[int]) -> torch.Tensor:
    """BD3-LM (Arriola et al. 2025) training mask over [x_t, x_0], written from the paper's definition:
    M_full = [[M_BD, M_OBC], [0, M_BC]] with
      M_BD[i, j]  = blk(i) == blk(j)   (noisy block sees itself)
      M_OBC[i, j] = blk(j) <  blk(i)   (noisy block sees earlier clean blocks)
      M_BC[i, j]  = blk(j) <= blk(i)   (clean block-causal)"""
    n = len(block_of)
    M = torch.zeros(2 * n, 2 * n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            M[i, j] = block_of[i] == block_of[j]
            M[i, n + j] = block_of[j] < block_of[i]
            M[n + i, n + j] = block_of[j] <= block_of[i]
    return M


@pytest.mark.parametrize("prompt_len", [0, 3])
@pytest.mark.parametrize("n,block", [(4, 1), (4, 2), (6, 3), (7, 3), (5, 2), (8, 8), (3, 4)])
def test_staircase_with_every_block_noisy_is_bd3lm(prompt_len, n, block):
    n_blocks = -(-n // block)
    meta, ours = masks.staircase(prompt_len, n, block, noisy_blocks=list(range(n_blocks)))
    T = prompt_len + n
    # BD3-LM sees the prompt as block 0 of its sequence; the prompt has no noisy copy, so its x_t
    # rows/columns are dropped from the reference
    blk = [0] * prompt_len + [j // block + 1 for j in range(n)]
    ref = bd3lm_mask(blk)
    noisy_idx = list(range(prompt_len, T))  # x_t rows of the answer tokens
    clean_idx = [T + i for i in range(T)]  # x_0 rows
    order = torch.tensor(clean_idx + noisy_idx)  # our row order is [clean, noisy]
    ref = ref[order][:, order]
    assert ours.shape == ref.shape == (T + n, T + n)
    assert torch.equal(ours, ref)
    # and noisy copies sit at their clean token's position
    assert meta["pos"][T:].tolist() == list(range(prompt_len, T))


# Two responses packed in one row, each [prompt 1 | answer block of 2]; the second case also numbers
# both docs' noisy block as state 1, so only the doc id keeps them apart.
@pytest.mark.parametrize("state", [[0, 0, 0, 0, 0, 0], [0, 1, 1, 0, 1, 1]])
def test_visibility_packed_docs_never_meet(state):
    block, state = torch.tensor([0, 1, 1, 0, 1, 1]), torch.tensor(state)
    doc = torch.tensor([0, 0, 0, 1, 1, 1])
    unpacked = masks.visibility(block, state, block, state)
    # without doc ids the second response would read the first one's tokens
    assert unpacked[4, :3].any()
    assert torch.equal(masks.visibility(block, state, block, state, q_doc=doc, k_doc=doc), m([
        [1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [0, 0, 0, 1, 0, 0],
        [0, 0, 0, 1, 1, 1],
        [0, 0, 0, 1, 1, 1],
    ]))


def test_visibility_batched_valid_and_rectangular():
    # queries = one noisy block, keys = cache slots [prompt 2 | block 1 | block 2]; slot 0 is padding
    k_block = torch.tensor([0, 0, 1, 1, 2, 2])
    k_state = torch.tensor([0, 0, 0, 0, 1, 1])
    q_block, q_state = torch.tensor([2, 2]), torch.tensor([1, 1])
    valid = m([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    out = masks.visibility(q_block, q_state, k_block, k_state, k_valid=valid)
    assert out.shape == (2, 2, 6)
    assert torch.equal(out[0], m([[0, 1, 1, 1, 1, 1]] * 2))
    assert torch.equal(out[1], m([[1, 1, 1, 1, 1, 1]] * 2))


def test_see_self_if_blind_only_touches_blind_rows():
    mask = m([
        [0, 0, 0],
        [1, 1, 0],
        [0, 0, 0],
    ])
    assert torch.equal(masks.see_self_if_blind(mask), m([
        [1, 0, 0],
        [1, 1, 0],
        [0, 0, 1],
    ]))
    # batched: a fully padded query row of a causal mask gets its diagonal, others unchanged
    causal = masks.causal(3, m([[0, 0, 1]]))
    assert torch.equal(masks.see_self_if_blind(causal)[0], m([
        [1, 0, 0],
        [0, 1, 0],
        [0, 0, 1],
    ]))


def test_sliding_window_cuts_old_keys_only():
    """Keys more than window - 1 positions back vanish; later keys stay as the base mask says, so a
    bidirectional block keeps seeing itself; positions, not indices, decide (left padding)."""
    pos = torch.tensor([[0, 0, 1, 2, 3, 4]])  # slot 0 is padding, as the AR decoder clamps it
    base = masks.bidirectional(6)[None]
    m = masks.sliding_window(base, pos, pos, 2)[0]
    assert m[5].tolist() == [False, False, False, False, True, True]  # position 4 sees 3 and 4
    assert m[2].tolist() == [True, True, True, True, True, True]     # position 1: 0 and 1 back, all later
    causal = masks.sliding_window(masks.causal(6)[None], pos, pos, 2)[0]
    assert causal[4].tolist() == [False, False, False, True, True, False]  # position 3 sees 2 and 3
