"""Row: the host-side state of one prompt between blocks, and the Generation it ends as."""
from orl.engine.sequence import Row
from orl.tokenizer import CharTokenizer

TOK = CharTokenizer()
EOS = TOK.eos_id


def test_row_cuts_at_the_first_eos_and_finishes():
    a, b = TOK.encode("ab")
    row = Row([a])
    row.add_block([a, b], steps=2, eos_id=EOS, now=0.5, last=False)
    assert not row.finished and row.done_at == 0.0
    row.add_block([b, EOS, EOS, a], steps=1, eos_id=EOS, now=0.9, last=False)
    assert row.finished and row.token_ids == [a, b, b, EOS] and row.done_at == 0.9
    assert (row.step_forwards, row.block_steps) == (3, [2, 1])
    row.commit_forwards += 1
    g = row.generation(TOK, prefill_s=0.1)
    assert (g.text, g.finished, g.n_tokens, g.forwards, g.total_s, g.trace) == ("abb", True, 4, 4, 0.9, None)


def test_row_without_eos_is_done_at_the_last_block():
    a = TOK.encode("a")[0]
    row = Row([a])
    row.add_block([a] * 3, steps=3, eos_id=EOS, now=0.4, last=True)
    assert not row.finished and row.done_at == 0.4 and row.generation(TOK, 0.1).tpf == 1.0
