"""A smaller draft vocabulary (orl.model.draft_vocab): the draft rows score only the given ids, the verify rows
the whole vocabulary, so self-speculative decoding emits the same tokens (own AR path, or a separate verifier's)
and only the drafts, hence the forwards, change."""
import copy
from dataclasses import replace

import pytest
import torch

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.model.draft_vocab import DraftVocabHead, draft_vocab, frequent_ids
from orl.model.row_split import RowSplitError, draft_rows_from, has_verifier, verify_with
from test_row_split import perturbed
from test_self_draft import BASE, PROMPTS

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def base():
    return load_checkpoint(BASE)


def test_frequent_ids_by_hand():
    streams = [torch.tensor([5, 2, 2, 3, 3, 3]), [4, 4, 2]]        # counts: 2 -> 3, 3 -> 3, 4 -> 2, 5 -> 1
    assert frequent_ids(streams, 2).tolist() == [2, 3]              # a tie goes to the smaller id
    assert frequent_ids(streams, 3, keep=[9]).tolist() == [2, 3, 9]  # kept ids count within n
    assert frequent_ids(streams, 10).tolist() == [2, 3, 4, 5]        # no more than the streams hold
    with pytest.raises(ValueError, match=">= 1"):
        frequent_ids(streams, 0)


def test_the_draft_rows_score_only_the_ids(base):
    plain, tok, _ = base
    ids = torch.tensor([1, 4, 7, 20])
    model = draft_vocab(copy.deepcopy(plain), ids)
    x = torch.tensor([tok.encode("cumsum:87734764=8,15")])
    T, c = x.shape[1], 6
    pos, mask = torch.arange(T)[None], torch.ones(1, T, T, dtype=torch.bool).tril()
    want = plain(x, pos, mask)[0]                                                   # [T, V]
    assert torch.equal(model(x, pos, mask)[0], want)                                # no cut: the whole head
    with draft_rows_from(model, c):
        got = model(x, pos, mask)[0]
    assert torch.equal(got[:c], want[:c])
    torch.testing.assert_close(got[c:, ids], want[c:, ids])
    others = torch.ones(got.shape[1], dtype=torch.bool)
    others[ids] = False
    assert torch.isneginf(got[c:, others]).all()
    assert not has_verifier(model)  # a cut of its own is not a verifier


@pytest.mark.parametrize("draft", ["fused", "diffusion"])
def test_own_path_tokens_do_not_change_and_a_narrow_vocab_costs_forwards(base, draft):
    model, tok, manifest = base
    plain = ARConfig(max_new_tokens=32)
    spec = ARConfig(max_new_tokens=32, spec_tokens=4, spec_draft=draft)
    want = ARDecoder(model, tok, manifest=manifest).generate(PROMPTS, plain)
    full = [ARDecoder(model, tok, manifest=manifest).generate([p], spec)[0] for p in PROMPTS]
    digits = [tok.encode(str(d))[0] for d in range(10)] + [tok.eos_id]
    narrow = draft_vocab(copy.deepcopy(model), torch.tensor(sorted(set(digits))))
    got = [ARDecoder(narrow, tok, manifest=manifest).generate([p], spec)[0] for p in PROMPTS]
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    # letters and commas can no longer be drafted: more forwards for the same tokens (so this can fail)
    assert sum(g.step_forwards for g in got) > sum(f.step_forwards for f in full)


def test_with_a_separate_verifier_the_tokens_are_the_verifiers(base):
    drafter, tok, manifest = base
    verifier = perturbed(drafter, 0.15)
    split = draft_vocab(verify_with(copy.deepcopy(drafter), verifier), torch.arange(drafter.args.vocab_size // 2))
    assert isinstance(split.lm_head, DraftVocabHead) and has_verifier(split)
    spec = ARConfig(max_new_tokens=32, spec_tokens=4, spec_draft="fused")
    want = ARDecoder(verifier, tok, manifest=manifest).generate(PROMPTS, ARConfig(max_new_tokens=32))
    got = [ARDecoder(split, tok, manifest=manifest).generate([p], spec)[0] for p in PROMPTS]
    assert [g.token_ids for g in got] == [w.token_ids for w in want]


def test_refusals(base):
    model, _, _ = base
    v = model.args.vocab_size
    for ids, words in (([1, 1], "repeat"), ([v], "within"), ([], "non-empty"), ([-1], "within")):
        with pytest.raises(ValueError, match=words):
            draft_vocab(copy.deepcopy(model), torch.tensor(ids, dtype=torch.long))
    once = draft_vocab(copy.deepcopy(model), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="already"):
        draft_vocab(once, torch.tensor([1, 2]))
    with pytest.raises(RowSplitError, match="verify_with first"):
        verify_with(once, copy.deepcopy(model))
    capped = copy.deepcopy(model)
    capped.args = replace(capped.args, final_logit_softcap=30.0)
    with pytest.raises(ValueError, match="soft-caps"):
        draft_vocab(capped, torch.tensor([1, 2]))


def test_the_file_round_trips_and_a_wrong_file_is_named(tmp_path):
    from orl.model.draft_vocab import read_ids, write_ids

    f = tmp_path / "dv.json"
    write_ids(f, torch.tensor([3, 1, 2]), 10, {"corpus": "x"})
    assert read_ids(f, 10).tolist() == [3, 1, 2]
    with pytest.raises(ValueError, match="vocabulary of 10 tokens, the model's has 11"):
        read_ids(f, 11)
    for text, words in (('{"format": "orl.draft_vocab", "vocab_size": 10, "ids": [1, 1]}', "repeat"),
                        ('{"format": "orl.draft_vocab", "vocab_size": 10, "ids": [10]}', "below 10"),
                        ('{"format": "orl.draft_vocab", "vocab_size": 10, "ids": [true]}', "below 10"),
                        ('{"ids": [1]}', "not a draft vocabulary file"), ("[", "not JSON")):
        f.write_text(text)
        with pytest.raises(ValueError, match=words):
            read_ids(f, 10)
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    with pytest.raises(ValueError, match="not replaced"):
        write_ids(other, torch.tensor([1]), 10, {})
    assert other.read_text() == "mine"


def test_orl_draft_vocab_and_generate_with_it(tmp_path, capsys):
    """`orl draft-vocab` counts a corpus's training streams only (its held-out split never chooses the drafts);
    `orl generate --draft-vocab` prints the same text as without it."""
    from safetensors.torch import save_file

    from orl.cli import main
    from orl.model.draft_vocab import read_ids

    _, tok, _ = load_checkpoint(BASE)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    five = tok.encode("5")[0]
    save_file({"code_train": torch.tensor(tok.encode("1,2,3,1,2,1"), dtype=torch.int32),
               "code_heldout": torch.tensor([five] * 50, dtype=torch.int32)}, corpus / "tokens.safetensors")
    (corpus / "corpus.json").write_text("{}")
    out = tmp_path / "dv.json"
    assert main(["draft-vocab", "--corpus", str(corpus), "--model", str(BASE), "--size", "3", "--out", str(out)]) == 0
    ids = read_ids(out, load_checkpoint(BASE)[0].args.vocab_size).tolist()
    assert sorted(ids) == sorted([tok.encode("1")[0], tok.encode(",")[0], tok.eos_id]) and five not in ids
    args = ["generate", "cumsum:877347649366134=", "--model", str(BASE), "--spec-draft", "fused", "--spec-tokens", "4",
            "--max-new-tokens", "24"]
    capsys.readouterr()
    assert main(args) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main(args + ["--draft-vocab", str(out)]) == 0
    narrow = capsys.readouterr().out.splitlines()
    assert narrow[0] == plain[0]
    forwards = [int(lines[1].split("forwards: ")[1].split()[0]) for lines in (plain, narrow)]
    assert forwards[1] > forwards[0], forwards  # digits can no longer be drafted
    assert main(["generate", "x", "--model", str(BASE), "--draft-vocab", str(out)]) != 0
    assert "only for self-speculative decoding" in capsys.readouterr().err
    keep = tmp_path / "dv.json.tmp"  # a file of that name is someone else's: untouched by a rewrite
    keep.write_text("precious")
    assert main(["draft-vocab", "--corpus", str(corpus), "--model", str(BASE), "--size", "2", "--out", str(out)]) == 0
    assert keep.read_text() == "precious" and [p.name for p in tmp_path.glob(".dv.json.*")] == []


def test_a_low_rank_drafter_keeps_its_head_delta_and_bad_files_are_named(base, tmp_path):
    """After low_rank_drafts (orl.model.draft_delta) the draft rows' head is the verifier's plus the delta, so
    a draft vocabulary of every id changes nothing; a file for another tokenizer, or of ids nothing can draft,
    is refused at attach."""
    from orl.model.draft_delta import low_rank_drafts
    from orl.model.draft_vocab import write_ids
    from orl.verifier import attach_draft_vocab

    drafter, tok, _ = base
    untied = copy.deepcopy(drafter)
    untied.lm_head.weight = torch.nn.Parameter(untied.lm_head.weight.detach().clone() * 1.3)
    verifier = perturbed(untied, 0.15)
    split = verify_with(copy.deepcopy(untied), verifier)
    low_rank_drafts(split, untied.args.dim)  # full rank: exact
    x = torch.tensor([tok.encode("cumsum:87734764=8,15")])
    T = x.shape[1]
    pos, mask = torch.arange(T)[None], torch.ones(1, T, T, dtype=torch.bool).tril()
    with draft_rows_from(split, 4):
        want = split(x, pos, mask)[0]
    every = draft_vocab(split, torch.arange(untied.args.vocab_size))
    with draft_rows_from(every, 4):
        torch.testing.assert_close(every(x, pos, mask)[0], want, rtol=1e-4, atol=1e-4)
    v = drafter.args.vocab_size
    f = tmp_path / "dv.json"
    write_ids(f, torch.tensor([1, 2]), v, {"tokenizer_sha256": "0" * 64})
    attach_draft_vocab(copy.deepcopy(drafter), str(f), "fused", tmp_path, tok)  # no tokenizer.json here: no check
    (tmp_path / "tokenizer.json").write_text("{}")  # any tokenizer.json: its digest is not the file's
    with pytest.raises(ValueError, match="another tokenizer"):
        attach_draft_vocab(copy.deepcopy(drafter), str(f), "fused", tmp_path, tok)
    write_ids(f, torch.tensor([tok.mask_id]), v, {})
    with pytest.raises(ValueError, match="none of its ids can be drafted"):
        attach_draft_vocab(copy.deepcopy(drafter), str(f), "fused", None, tok)
    with pytest.raises(ValueError, match="within"):
        write_ids(f, torch.tensor([v]), v, {})


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_split_drafter_with_a_draft_vocabulary_gives_the_verifiers_tokens():
    """The GPU path: VocabHead keeps F.linear there, the draft rows their own head; the tokens are the verifier's."""
    drafter, tok, manifest = load_checkpoint(BASE)
    verifier = perturbed(drafter, 0.15).to("cuda")  # perturbed on the CPU (its noise generator is a CPU one)
    drafter = drafter.to("cuda")
    split = draft_vocab(verify_with(copy.deepcopy(drafter), verifier),
                        torch.arange(drafter.args.vocab_size // 2, device="cuda"))
    spec = ARConfig(max_new_tokens=32, spec_tokens=4, spec_draft="fused")
    want = ARDecoder(verifier, tok, manifest=manifest).generate(PROMPTS, ARConfig(max_new_tokens=32))
    got = [ARDecoder(split, tok, manifest=manifest).generate([p], spec)[0] for p in PROMPTS]
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
