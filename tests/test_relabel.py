"""Reference relabelling (orl.train.relabel): which states of an unverified rollout are kept, what they
target, and that the kept states still replay exactly as the engine decoded them."""
from dataclasses import replace

import pytest
import torch

from orl.engine import DecodeConfig
from orl.engine.sequence import Generation
from orl.engine.trace import StepRecord
from orl.eval.tasks.base import Sample
from orl.model.vocab import SpecialIds, special_ids
from orl.tokenizer import CharTokenizer
from orl.train.relabel import reference_ids, relabel, relabel_unverified
from orl.train.replay import make_unit
from orl.train.rollout import Rollout
from tests.test_replay import L, TOK, assert_replays, rollouts, tiny_model

M, EOS = TOK.mask_id, TOK.eos_id
IDS = SpecialIds(M, EOS, TOK.pad_id, (), (EOS,))
CFG = DecodeConfig(block_len=4, max_new_tokens=8, layout="prompt_block")  # the rollouts' decode


def step(block, s, canvas, tokens, conf=0.95):
    canvas = torch.tensor(canvas)
    return StepRecord(block, s, canvas, canvas == M, None, None, torch.tensor(tokens), torch.full((4,), conf),
                      torch.zeros(4), torch.zeros(4, dtype=torch.bool))


def hand_rollout():
    """Prompt of 3 tokens, blocks of 4, answer 10 11 12 13 | 14 EOS: the rollout writes 14 then 20 in block 1."""
    trace = [step(0, 0, [M, M, M, M], [10, 11, 12, 13]),
             step(0, 1, [10, 11, M, M], [10, 11, 12, 13]),
             step(1, 0, [M, M, M, M], [14, 20, EOS, EOS]),
             step(1, 1, [14, M, M, M], [14, 20, EOS, EOS]),   # proposes 20 where the reference has EOS
             step(1, 2, [14, 20, M, M], [14, 20, EOS, EOS])]  # 20 committed: the rollout left the reference
    g = Generation([5, 6, 7], [10, 11, 12, 13, 14, 20, EOS], "", True, 1, 5, 1, 0.0, 0.0, [2, 3], trace)
    return Rollout(Sample("long7xp", "train", 0, "p", "a"), g, verified=False)


def test_keeps_the_states_before_the_first_wrong_commit_and_targets_the_reference():
    r = hand_rollout()
    ref = [10, 11, 12, 13, 14, EOS]
    x = relabel(r, ref, IDS, 4, "prompt_block", 8)
    assert [(s.block, s.step) for s in x.gen.trace] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert x.gen.token_ids == ref and x.gen.finished and not x.verified
    # the proposal the reference contradicts is not anchored; the others keep their confidence
    assert x.gen.trace[3].confidence.tolist() == pytest.approx([0.95, 0.0, 0.95, 0.95])
    assert x.gen.trace[0].confidence.tolist() == pytest.approx([0.95] * 4)
    u = make_unit(x, 4, EOS, 8, kl_conf=0.9, max_new_tokens=8)
    assert u.targets[3:11].tolist() == [10, 11, 12, 13, 14, EOS, EOS, EOS]  # the clean answer is the reference
    assert u.targets[u.state == 4].tolist() == [14, EOS, EOS, EOS]
    assert u.confident[u.state == 4].tolist() == [False, False, True, True]  # slot 0 is no longer unresolved


def test_a_wrong_earlier_block_drops_every_later_state():
    r = hand_rollout()
    x = relabel(r, [10, 11, 19, 13, 14, EOS], IDS, 4, "prompt_block", 8)  # block 0 slot 2 disagrees
    assert [(s.block, s.step) for s in x.gen.trace] == [(0, 0), (0, 1)]
    assert relabel(r, [19, 11, 12, 13, 14, EOS], IDS, 4, "prompt_block", 8).gen.trace[-1].step == 0
    # a rollout already wrong in the first state's committed slots keeps nothing
    r2 = replace(r, gen=replace(r.gen, trace=r.gen.trace[1:]))
    assert relabel(r2, [19, 11, 12, 13, 14, EOS], IDS, 4, "prompt_block", 8) is None


def test_absolute_grid_reads_the_prompt_tail_as_fixed():
    # absolute_grid: a 3-token prompt's first canvas starts at 0 and holds the prompt tail in slots 0-2
    r = hand_rollout()
    g = replace(r.gen, trace=[step(0, 0, [5, 6, 7, M], [5, 6, 7, 10]), step(1, 0, [M, M, M, M], [11, 12, 13, 14]),
                              step(1, 1, [11, 12, M, M], [11, 12, 13, 14]), step(1, 2, [11, 12, 16, 14], [0, 0, 0, 0])])
    x = relabel(replace(r, gen=g), [10, 11, 12, 13, 14, EOS], IDS, 4, "absolute_grid", 8)
    assert [(s.block, s.step) for s in x.gen.trace] == [(0, 0), (1, 0), (1, 1)]


def test_any_end_id_ends_the_answer():
    # a rollout that ends at another end id (9: end of turn) follows a reference that ends at EOS
    r = hand_rollout()
    g = replace(r.gen, token_ids=[10, 11, 12, 13, 14, 9],
                trace=r.gen.trace[:3] + [step(1, 1, [14, 9, M, M], [14, 9, EOS, EOS])])
    x = relabel(replace(r, gen=g), [10, 11, 12, 13, 14, EOS], IDS._replace(eos_ids=(EOS, 9)), 4, "prompt_block", 8)
    assert len(x.gen.trace) == 4 and x.gen.trace[3].confidence.tolist() == pytest.approx([0.95] * 4)
    assert relabel(replace(r, gen=g), [10, 11, 12, 13, 14, EOS], IDS, 4, "prompt_block", 8).gen.trace[-1].block == 1
    assert len(relabel(replace(r, gen=g), [10, 11, 12, 13, 14, EOS], IDS, 4, "prompt_block", 8).gen.trace) == 3


def test_reference_ids_tokenize_the_answer_after_its_prompt():
    class Bos(CharTokenizer):
        def encode(self, text):
            return [3] + super().encode(text)

    assert reference_ids(Bos(), "1+2=", "3", EOS) == TOK.encode("3") + [EOS]  # BOS belongs to the prompt

    class Merges(CharTokenizer):  # "=3" is one token: the answer would start inside the prompt's last token
        def encode(self, text):
            return [99 if t == "=3" else super(Merges, self).encode(t)[0] for t in text.replace("=3", "\0=3\0").split("\0") if t] \
                if "=3" in text else super().encode(text)

    assert reference_ids(Merges(), "1+2=", "3", EOS) is None
    assert reference_ids(TOK, "1+2=", "\u00e9", EOS) is None  # a character the tokenizer lacks


def group_of(sample, verified):
    """One rollout a flag, the hand-built trace (its first state is all masks, so always usable); the verified
    ones wrote 10 11 12 13 14 EOS."""
    r = hand_rollout()
    return [replace(r, sample=sample, verified=v, gen=replace(r.gen, token_ids=[10, 11, 12, 13, 14, EOS]) if v else r.gen)
            for v in verified]


def test_which_rollouts_are_relabelled_and_toward_what():
    from orl.eval.tasks import get_task

    s = get_task("long7xp").sample("train", 0)
    ref = reference_ids(TOK, s.prompt, s.answer, EOS)
    # a prompt with a verified sibling: its answer (the one kept) is the target, the verified ones stay out
    g1 = group_of(s, [True, False, False])
    out = relabel_unverified(g1, [g1[0]], 3, TOK, IDS, CFG)
    assert len(out) == 2 and all(x.gen.token_ids == [10, 11, 12, 13, 14, EOS] for x in out)
    assert out[0].sample is s and all(len(x.gen.trace) == 4 for x in out)  # up to the 20 committed in block 1
    # no verified sibling: the reference, tokenized after its prompt, up to the end of the last kept block
    g2 = group_of(s, [False, False])
    out = relabel_unverified(g2, [], 2, TOK, IDS, CFG)
    assert len(out) == 2 and all(x.gen.token_ids == ref[:4] and len(x.gen.trace) == 1 for x in out)
    # a reference its verifier rejects (an empty regex answer) relabels nothing; all verified: nothing to do
    bad = replace(s, answer="")
    assert relabel_unverified(group_of(bad, [False, False]), [], 2, TOK, IDS, CFG) == []
    assert relabel_unverified(group_of(s, [True, True]), [], 2, TOK, IDS, CFG) == []
    # a rollout of a task without stop strings that met one (a decode that set its own) is relabelled as any other
    g3 = group_of(s, [False, False])
    g3[0] = replace(g3[0], gen=replace(g3[0].gen, stop="\n"))
    assert len(relabel_unverified(g3, [], 2, TOK, IDS, CFG)) == 2


NL = 30  # the stop string's token in the hand-built traces


def stop_rollout():
    """Answer 10 11 12 13 | 14 NL, then the stop: block 1 commits 20 in slot 3, after the stop (dropped text), then 21
    where the reference has its stop token."""
    trace = [step(0, 0, [M, M, M, M], [10, 11, 12, 13]),
             step(0, 1, [10, 11, 12, 13], [10, 11, 12, 13]),
             step(1, 0, [M, M, M, M], [14, NL, 20, 20]),
             step(1, 1, [M, M, M, 20], [14, NL, 20, 20]),
             step(1, 2, [14, M, M, 20], [14, 21, 20, 20]),   # proposes 21 where the reference has its stop token
             step(1, 3, [14, 21, M, 20], [14, 21, NL, 20])]  # 21 committed: the rollout left the reference
    g = Generation([5, 6, 7], [10, 11, 12, 13, 14, 21, NL], "", True, 1, 6, 1, 0.0, 0.0, [2, 4], trace, stop="\n")
    return Rollout(Sample("long7xp:3shot", "train", 0, "p", "a"), g, verified=False)


def test_a_stop_string_ends_the_reference_and_nothing_after_it_is_compared():
    from orl.train.losses import IGNORE

    r, ref = stop_rollout(), [10, 11, 12, 13, 14, NL]
    x = relabel(r, ref, IDS, 4, "prompt_block", 8, stop="\n")
    # the 20 committed after the stop's slot is not compared: the states up to the wrong 21 are kept
    assert [(s.block, s.step) for s in x.gen.trace] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert x.gen.token_ids == ref and x.gen.stop == "\n" and x.gen.finished
    assert x.gen.trace[4].confidence.tolist() == pytest.approx([0.95, 0.0, 0.95, 0.95])  # only 21 is contradicted
    u = make_unit(x, 4, EOS, 8, kl_conf=0.9, max_new_tokens=8)
    assert u.targets[3:9].tolist() == ref and u.targets[9:11].tolist() == [IGNORE, IGNORE]
    assert u.targets[u.state == 4].tolist() == [14, NL, IGNORE, IGNORE]
    # the same reference ending at EOS instead: the 20 after it is a wrong commit, so block 1 keeps one state
    y = relabel(r, ref + [EOS], IDS, 4, "prompt_block", 8)
    assert [(s.block, s.step) for s in y.gen.trace] == [(0, 0), (0, 1), (1, 0)] and y.gen.stop is None
    # kept states ending before the stop's block: an unfinished answer, with no stop
    z = relabel(r, [10, 11, 19, 13, 14, NL], IDS, 4, "prompt_block", 8, stop="\n")
    assert z.gen.token_ids == [10, 11, 19, 13] and z.gen.stop is None and not z.gen.finished


def test_tasks_with_stop_strings_are_relabelled_toward_answer_plus_stop():
    from orl.eval.tasks import get_task

    task = get_task("long7xp:3shot")
    assert task.stop == ("\n",)
    s = task.sample("train", 0)
    ref = reference_ids(TOK, s.prompt, s.answer, EOS, "\n")
    assert ref == TOK.encode(s.answer + "\n") and EOS not in ref
    rows = [replace(stop_rollout(), sample=s) for _ in range(2)]
    out = relabel_unverified(rows, [], 2, TOK, IDS, CFG)
    assert len(out) == 2 and all(x.gen.token_ids == ref[:4] and x.gen.stop is None for x in out)
    # a verified sibling that met the stop: its answer, stop token included, is the target
    sib = replace(stop_rollout(), sample=s, verified=True,
                  gen=replace(stop_rollout().gen, token_ids=[10, 11, 12, 13, 14, NL]))
    out = relabel_unverified([sib, rows[0]], [sib], 2, TOK, IDS, CFG)
    assert len(out) == 1 and out[0].gen.token_ids == [10, 11, 12, 13, 14, NL] and out[0].gen.stop == "\n"
    assert len(out[0].gen.trace) == 5


@pytest.mark.parametrize("residual,shift", [("adapter", False), ("adapter", True)])
def test_relabelled_states_replay_as_decoded(residual, shift):
    """A reference that leaves each rollout inside its second block: the kept states replay with the
    engine's entropies and confidences (the clean prefix they see is the reference, which equals what
    the cache held), and the kept answer is the reference."""
    model = tiny_model(shift=shift)
    rs = rollouts(model, residual)
    out = []
    for r in rs:
        ref = list(r.gen.token_ids)
        if len(ref) < 3:
            continue  # too short to leave the answer after a first state
        i = L + 2 if len(ref) > L + 2 else len(ref) - 2  # block 1's third slot, or a short answer's last but one
        ref[i] = 3 if ref[i] != 3 else 4
        r.verified = False
        x = relabel(r, ref, IDS, L, "prompt_block", 24)
        b = i // L
        assert x is not None and x.gen.token_ids == ref[:(b + 1) * L]  # up to the end of the last kept block
        assert max(s.block for s in x.gen.trace) == b and len(x.gen.trace) < len(r.gen.trace)
        # a prefix of the rollout's states; only the confidences the reference contradicts are zeroed
        kept = r.gen.trace[:len(x.gen.trace)]
        for a, b in zip(x.gen.trace, kept):
            assert torch.equal(a.canvas, b.canvas) and torch.equal(a.z, b.z)
            assert torch.equal(a.confidence[a.confidence > 0], b.confidence[a.confidence > 0])
        out.append(replace(x, gen=replace(x.gen, trace=kept)))
    assert len(out) >= 4
    assert_replays(model, out, residual)
    ids = special_ids(TOK, model.args.vocab_size)
    u = make_unit(out[0], L, ids.eos, model.args.dim, kl_conf=0.5, max_new_tokens=24)
    n = len(out[0].gen.prompt_ids)
    assert u.targets[n + L + 2] == out[0].gen.token_ids[L + 2]


def test_a_block_wholly_past_the_stop_is_no_state():
    """A reference that ends with its stop token at a block's end (a decode that did not stop there: its own stop
    strings): the next block's states see only text after the answer, so none is kept."""
    trace = [step(0, 0, [M, M, M, M], [10, 11, 12, NL]),
             step(0, 1, [10, 11, 12, NL], [10, 11, 12, NL]),
             step(1, 0, [M, M, M, M], [20, 20, 20, 20]),
             step(1, 1, [20, 20, M, M], [20, 20, 20, 20])]
    g = Generation([5, 6, 7], [10, 11, 12, NL, 20, 20, 20, 20], "", False, 1, 4, 1, 0.0, 0.0, [2, 2], trace)
    r = Rollout(Sample("long7xp", "train", 0, "p", "a"), g, verified=False)
    x = relabel(r, [10, 11, 12, NL], IDS, 4, "prompt_block", 8, stop="\n")
    assert [(s.block, s.step) for s in x.gen.trace] == [(0, 0), (0, 1)] and x.gen.stop == "\n"


def test_the_rollouts_own_stop_strings_decide_the_reference():
    from orl.eval.tasks import get_task

    s = get_task("long7xp").sample("train", 0)  # a task without stop strings, decoded with stop "\n"
    r = stop_rollout()
    sib = replace(r, sample=s, verified=True, gen=replace(r.gen, token_ids=[10, 11, 12, 13, 14, NL]))
    rows = [sib, replace(r, sample=s)]
    out = relabel_unverified(rows, [sib], 2, TOK, IDS, replace(CFG, stop=("\n",)))
    assert len(out) == 1 and out[0].gen.token_ids == [10, 11, 12, 13, 14, NL] and out[0].gen.stop == "\n"
    assert len(out[0].gen.trace) == 5  # the 20 after the stop is not compared
    # the same rows read as decoded without stop strings (the task's own: none): a sibling that met "\n" is not a
    # whole answer of that decode, so the reference (and EOS) is the target
    out = relabel_unverified(rows, [sib], 2, TOK, IDS, CFG)
    assert len(out) == 1 and out[0].gen.token_ids == reference_ids(TOK, s.prompt, s.answer, EOS)[:4]
    # a stop task's verified sibling that ended at EOS is whole too: its answer and EOS are the target
    k = get_task("long7xp:3shot").sample("train", 0)
    eos_sib = replace(r, sample=k, verified=True, gen=replace(r.gen, token_ids=[10, 11, 12, 13, 14, EOS], stop=None))
    out = relabel_unverified([eos_sib, replace(r, sample=k)], [eos_sib], 2, TOK, IDS, CFG)
    assert len(out) == 1 and out[0].gen.token_ids[-2:] == [14, EOS] and out[0].gen.stop is None
    # a reference answer that holds a stop string is never a target: the decode would end inside it
    bad = replace(k, answer=k.answer[:3] + "\n" + k.answer[3:])
    assert relabel_unverified([replace(r, sample=bad)] * 2, [], 2, TOK, IDS, CFG) == []
