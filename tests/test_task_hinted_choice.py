"""Index-hinted multi-answer families (orl/eval/tasks/hinted_choice.py): hand-checked answers and near misses,
free choices kept, the v7 ranges and beyond splits, malformed prompts named, and the markers-only shape."""
import random

import pytest

from orl.eval.tasks import get_task
from orl.tokenizer import CharTokenizer

SPLIT, CONSTR, KEYS = "?+?=a3b4c7:a", "PQRST of bdg, b to g, no equal neighbours:P", "ksort:c3,a1,b3,d2="
KEYED = "PQRST of bdg, P=b, T=g, no equal neighbours:P"  # constr7xq: CONSTR with the ends keyed by slot
PINNED = {"constr7xp": "62233aa1551ca3a1", "constr7xph": "5d3881e3eee76d0c", "constr7xpe": "8eab3168c2a6d91d",
          "constr7xq": "59a57001eb73d764", "constr7xqh": "2d0a72a15b4ef0c7"}


@pytest.mark.parametrize("name,prompt,good,bad", [
    # 347 = 120 + 227 = 000 + 347 = 159 + 188 (a carry is fine: the verifier checks the sum, not the reference's rule)
    ("split7xp", SPLIT, ["1b2c0+a2b2c7", "0b0c0+a3b4c7", "1b5c9+a1b8c8"],
     ["1b2c0+a2b2c8",        # sums to 348
      "1b2c0+a2b2",          # the second addend is a digit short
      "1b2c0+b2a2c7",        # markers out of order
      "1b2c0a2b2c7",         # no '+'
      "1b2c0+a2b2c7+"]),
    ("constr7xp", CONSTR, ["bQdRbSdTg", "bQgRbSdTg", "bQdRgSdTg"],
     ["bQdRbSdTd",           # ends on d, not g
      "bQdRbSdTgUb",         # a sixth slot the prompt does not have
      "bQdRbSg",             # a slot short
      "bQdRdSbTg",           # equal neighbours d d
      "bQdRbSdUg",           # slot U instead of T
      "bQdRhSdTg"]),         # h is not one of bdg
    ("constr7xq", KEYED, ["bQdRbSdTg", "bQgRbSdTg", "bQdRgSdTg"],
     ["bQdRbSdTd", "bQdRbSdTgUb", "bQdRbSg", "bQdRdSbTg", "bQdRbSdUg", "bQdRhSdTg"]),  # the same near misses
    ("keysort7x", KEYS, ["a1d2c3b3", "a1d2b3c3"],
     ["a1d2c3",              # a record short
      "a1d2c3b3b3",          # a record twice
      "a1c3d2b3",            # keys decrease
      "a1d2c3b4",            # b's key is 3
      "adcb",                # keysort7's format, without the keys
      "a1d2c3b"]),
])
def test_accepts_free_choices_and_rejects_near_misses(name, prompt, good, bad):
    task = get_task(name)
    assert all(task.verify(prompt, g) for g in good)
    assert not any(task.verify(prompt, b) for b in bad), [b for b in bad if task.verify(prompt, b)]


def test_sizes_of_hand_written_prompts():
    assert get_task("split7xp").size(SPLIT) == 3
    assert get_task("constr7xp").size(CONSTR) == 5 == get_task("constr7xq").size(KEYED)
    assert get_task("keysort7x").size(KEYS) == 4


def test_markers_right_is_the_shape_not_the_answer():
    split, constr, keys = (get_task(n).inner for n in ("split7xp", "constr7xp", "keysort7x"))
    assert split.markers_right(SPLIT, "9b9c9+a9b9c9") and not split.markers_right(SPLIT, "1b2c0+a2b2")
    assert constr.markers_right(CONSTR, "bQbRbSbTb") and not constr.markers_right(CONSTR, "bQdRbSdTgUb")
    assert keys.markers_right(KEYS, "b1c1a1d1") and not keys.markers_right(KEYS, "a1d2c3")


@pytest.mark.parametrize("name,prompt,match", [
    ("split7xp", "?+?=a3b4c7:b", "not a split_hints prompt"), ("split7xp", "?+?=347", "not a split_hints prompt"),
    ("split7xp", "?+?=a3b4c7:", "not a split_hints prompt"),
    ("constr7xp", "5 of bdg, b to g, no equal neighbours:", "not a constr_hints prompt"),
    ("constr7xp", "PQRST of bdg, b to g, no equal neighbours:Q", "not a constr_hints prompt"),
    ("constr7xp", "PQST of bdg, b to g, no equal neighbours:P", "not a constr_hints prompt"),  # not a run of A-Z
    ("constr7xq", CONSTR, "not a constr_keyed prompt"),  # the unkeyed format
    ("constr7xq", "PQRST of bdg, Q=b, T=g, no equal neighbours:P", "not a constr_keyed prompt"),  # start keyed to Q
    ("constr7xq", "PQRST of bdg, P=b, S=g, no equal neighbours:P", "not a constr_keyed prompt"),  # end keyed to S
    ("constr7xq", "PQRST of bdg, P=b, T=h, no equal neighbours:P", "not a constr_keyed prompt"),  # h not a letter
    ("constr7xq", "PQRST of bdg, P=b, T=g, no equal neighbours:Q", "keyed to the first and the last slot"),  # close
    ("constr7xq", "PQRST of bbg, P=b, T=g, no equal neighbours:P", "not a constr_keyed prompt"),  # repeated letter
    ("constr7xq", "PQST of bdg, P=b, T=g, no equal neighbours:P", "not a constr_keyed prompt"),  # not a run of A-Z
    ("constr7xp", KEYED, "not a constr_hints prompt"),
    ("keysort7x", "sort:c3,a1=", "not a keysort_keys prompt"), ("keysort7x", "ksort:c3,c1=", "not a keysort_keys prompt"),
])
def test_malformed_prompts_are_named(name, prompt, match):
    with pytest.raises(ValueError, match=match):
        get_task(name).verify(prompt, "x")


@pytest.mark.parametrize("name", ["split7xp", "constr7xp", "constr7xq", "keysort7x"])
def test_ranges_beyond_splits_and_context(name):
    task, tok = get_task(name), CharTokenizer()
    for split, (lo, hi) in (("train", task.sizes), ("heldout", task.sizes), ("beyond", task.beyond)):
        samples = [task.sample(split, i) for i in range(300)]
        sizes = {task.size(s.prompt) for s in samples}
        assert sizes == set(range(lo, hi + 1)), (split, sorted(sizes))
        assert all(task.verify(s.prompt, s.answer) for s in samples)
        assert all(task.inner.markers_right(s.prompt, s.answer) for s in samples)
        # tiny_model7's context is 192: prompt, answer and EOS fit with room to spare
        assert max(len(tok.encode(s.prompt)) + len(tok.encode(s.answer)) for s in samples) < 120
    train = {task.canonical(task.sample("train", i).prompt) for i in range(300)}
    assert not train & {task.canonical(task.sample("heldout", i).prompt) for i in range(300)}


def test_references_keep_the_free_choice():
    """The reference is one valid answer drawn at random: the same prompt gets different references, so the
    training target stays multimodal as in the plain families."""
    for name in ("split7xp", "constr7xp", "constr7xq"):
        task = get_task(name).inner
        seen: dict[str, set[str]] = {}
        rng = random.Random(0)
        for _ in range(4000):
            prompt, answer = task.generate(rng)
            seen.setdefault(prompt, set()).add(answer)
        assert any(len(answers) > 1 for answers in seen.values()), name
    # keysort prompts rarely repeat: instead, ties are not kept in the prompt's order (a stable sort's answer)
    task, rng, unstable = get_task("keysort7x").inner, random.Random(0), 0
    for _ in range(400):
        prompt, answer = task.generate(rng)
        records = prompt[len("ksort:"):-1].split(",")
        unstable += answer != "".join(sorted(records, key=lambda r: r[1]))
    assert unstable > 200


def test_constr7xp_slots_and_letters_stay_apart():
    # slots are upper case, the word's letters lower case: a slot can never be read as a letter
    task = get_task("constr7xp")
    for i in range(200):
        s = task.sample("beyond", i)
        assert s.answer[::2].islower() and s.answer[1::2].isupper()


@pytest.mark.parametrize("name,prompt,answer,size", [
    ("split7xph", "dup:a3b4c7:a", "3b4c7+a3b4c7", 3),
    ("constr7xph", "PQRST of bd, b to b, no equal neighbours:P", "bQdRbSdTb", 5),
    ("constr7xph", "PQRS of dg, g to d, no equal neighbours:P", "gQdRgSd", 4),
    ("keysort7xh", "kcopy:c3,a1,b3=", "c3a1b3", 3),
    ("split7xps", "?+?=a3b4c7:a1b2c0+", "a2b2c7", 3),
    ("split7xps", "?+?=X9Y0:X9Y0+", "X0Y0", 2),
    ("split7xpc", "copy:a3b4c7:a", "3b4c7", 3),
    ("constr7xpe", "PQR of bdg, b to g, no equal neighbours:PbQdR", "g", 3),
    ("constr7xqh", "PQRST of bd, P=b, T=b, no equal neighbours:P", "bQdRbSdTb", 5),
    ("constr7xqh", "PQRS of dg, P=g, S=d, no equal neighbours:P", "gQdRgSd", 4),
])
def test_length_helpers_by_hand(name, prompt, answer, size):
    helper = get_task(name)
    assert helper.verify(prompt, answer) and not helper.verify(prompt, answer[:-1])
    assert helper.size(prompt) == size


@pytest.mark.parametrize("name,prompt", [
    ("split7xph", "dup:a3b4c7:b"), ("split7xph", "dup:a3c4:a"), ("constr7xph", "PQRST of bd, b to b, no equal neighbours:Q"),
    ("constr7xph", "PQRT of bd, b to d, no equal neighbours:P"), ("constr7xph", "PQR of bb, b to b, no equal neighbours:P"),
    ("constr7xph", "PQRS of bd, b to b, no equal neighbours:P"), ("constr7xph", "PQR of bd, g to g, no equal neighbours:P"), ("keysort7xh", "kcopy:c3,c1="),
    ("split7xps", "?+?=a3b4:a4b0+"), ("split7xps", "?+?=a3b4:a1c0+"), ("split7xps", "?+?=a3b4:a1b0+b"),  # x_i > N_i,
    ("split7xps", "?+?=a3b4:a1+"), ("split7xps", "?+?=a0b4:a0b0+"),  # other markers, the marker given, short, leading 0
    ("split7xpc", "copy:a3b4:b"), ("split7xpc", "copy:a3c4:a"), ("split7xpc", "copy:a0b4:a"),
    ("constr7xpe", "PQR of bdg, b to g, no equal neighbours:PbQgR"), ("constr7xpe", "PQR of bdg, b to g, no equal neighbours:PdQbR"),
    ("constr7xpe", "PQR of bdg, b to g, no equal neighbours:PbQbR"), ("constr7xpe", "PQR of bdg, b to g, no equal neighbours:PbRdQ"),
    ("constr7xpe", "PQR of bdg, b to g, no equal neighbours:PbQeR"),  # ends next to its end, wrong start, equal, order, letter
    ("constr7xqh", "PQRST of bd, P=b, S=b, no equal neighbours:P"), ("constr7xqh", "PQRST of bd, Q=b, T=b, no equal neighbours:P"),
    ("constr7xqh", "PQRT of bd, P=b, T=d, no equal neighbours:P"), ("constr7xqh", "PQRS of bd, P=b, S=b, no equal neighbours:P"),
    ("constr7xqh", "PQRST of bd, b to b, no equal neighbours:P"),  # end keyed to S, start to Q, not a run, parity, unkeyed
    ("constr7xqh", "PQRST of bd, P=b, T=b, no equal neighbours:Q"),  # the close marker
])
def test_length_helpers_name_malformed_prompts(name, prompt):
    with pytest.raises(ValueError, match=f"not a {name} prompt"):
        get_task(name).verify(prompt, "x")


@pytest.mark.parametrize("name,family,hi", [("split7xph", "split7xp", 12), ("constr7xph", "constr7xp", 20),
                                            ("keysort7xh", "keysort7x", 12), ("split7xps", "split7xp", 12),
                                            ("split7xpc", "split7xp", 12), ("constr7xpe", "constr7xp", 20),
                                            ("constr7xqh", "constr7xq", 20)])
def test_length_helpers_cover_the_beyond_sizes_and_are_training_only(name, family, hi):
    from orl.eval.tasks import HELPER_NAMES
    helper, fam = get_task(name), get_task(family)
    assert name in HELPER_NAMES and family not in HELPER_NAMES and helper.family == family
    sizes = {helper.size(helper.sample("train", i).prompt) for i in range(400)}
    assert max(sizes) == hi and set(range(fam.beyond[0], fam.beyond[1] + 1)) <= sizes
    sample = helper.sample("train", 0)
    if name in ("constr7xph", "constr7xqh"):  # the family's own format with two letters: its answers are the family's too
        assert all(fam.verify(s.prompt, s.answer) for s in (helper.sample("train", i) for i in range(100)))
    elif name == "constr7xpe":  # the family's prompt and walk: with the end letter, a valid family answer
        for s in (helper.sample("train", i) for i in range(100)):
            head, walk = s.prompt.split(":")
            assert fam.verify(head + ":" + walk[0], walk[1:] + s.answer)
    elif name == "split7xps":  # the family's prompt and first addend: with the answer, a valid family answer
        for s in (helper.sample("train", i) for i in range(100)):
            head, first = s.prompt.split(":")  # first: the first addend and its +
            assert fam.verify(head + ":" + first[0], first[1:] + s.answer)
            assert not fam.verify(head + ":" + first[0], first[1:] + s.answer[:-1] + "9") or s.answer.endswith("9")
    else:  # its own opening: a helper prompt is never a family prompt
        with pytest.raises(ValueError):
            fam.verify(sample.prompt, "x")


@pytest.mark.parametrize("name,prompt,output", [
    ("keysort7x", KEYS, "a1\n\nd2c3b3"), ("keysort7x", KEYS, "\n\na1d2c3b3"),  # `.` skipped newlines (review)
    ("split7xp", SPLIT, "\n1b2c0+a2b2c7"), ("constr7xp", CONSTR, "b\nQdRbSdTg"),
])
def test_stray_characters_are_wrong(name, prompt, output):
    assert not get_task(name).verify(prompt, output)


@pytest.mark.parametrize("name,prompt", [
    ("split7xp", "?+?=a3a4:a"), ("split7xp", "?+?=c3a4:c"), ("split7xp", "?+?=a0b5:a"),   # repeated, not a run, leading 0
    ("constr7xp", "PQR of bdg, a to g, no equal neighbours:P"), ("constr7xp", "PQR of bbg, b to g, no equal neighbours:P"),
])
def test_malformed_prompts_found_in_review(name, prompt):
    with pytest.raises(ValueError, match="not a"):
        get_task(name).verify(prompt, "x")


def test_check_strips_like_verify():
    assert get_task("split7xp").inner.check(SPLIT, "1b2c0+a2b2c7 ")


@pytest.mark.parametrize("name", ["split7xp", "constr7xp", "constr7xq"])
def test_held_out_problems_are_not_trained_under_other_markers(name):
    task = get_task(name)
    constr = lambda p: (lambda c: (len(c.slots), c.letters, c.first, c.last))(task.inner.parse(p))  # noqa: E731
    strip = {"split7xp": lambda p: p.split(":")[0][4:][1::2],                  # N's digits
             "constr7xp": constr, "constr7xq": constr}[name]
    train = {strip(task.sample("train", i).prompt) for i in range(5000)}
    held = [strip(task.sample("heldout", i).prompt) for i in range(300)]
    assert not [h for h in held if h in train]


@pytest.mark.parametrize("name", ["split7xps", "split7xpc"])
def test_split_helpers_never_draw_the_familys_held_out_n(name):
    # split7xps prompts carry a complete family answer: by its own hash it trained 171 of 300 held-out N (review)
    helper, family = get_task(name), get_task("split7xp")
    held = {family.sample("heldout", i).prompt.split(":")[0][4:][1::2] for i in range(300)}
    digits = {helper.parse(helper.sample("train", i).prompt)[1][1::2] for i in range(20000)}  # N of each draw
    assert len(held) > 150 and not held & digits
    assert {len(d) for d in digits} >= set(range(2, 13))


def test_end_letter_helper_never_draws_the_familys_held_out_problems():
    helper, family = get_task("constr7xpe"), get_task("constr7xp")
    held = {family.inner.canonical(family.sample("heldout", i).prompt) for i in range(300)}
    drawn = {family.inner.canonical(s.prompt.split(":")[0] + ":" + s.prompt.split(":")[1][0])
             for s in (helper.sample("train", i) for i in range(5000))}
    assert len(held) > 100 and not held & drawn


def test_length_helpers_refuse_sizes_their_format_cannot_mark():
    from orl.eval.tasks.hint_choice_helpers import CopyRecords, DupMarked, MarkedCopy, SecondAddend, TwoLetterEnds
    for cls, too_many in ((DupMarked, 53), (TwoLetterEnds, 27), (CopyRecords, 13), (MarkedCopy, 53), (SecondAddend, 53)):
        cls(2, too_many - 1)
        with pytest.raises(ValueError, match=f"<= {too_many - 1}"):
            cls(2, too_many)


def test_constr7xq_is_constr7xp_with_its_ends_keyed():
    """constr7xp's problems (draws, references, train/held-out split) under the keyed prompt, so a model trained on
    one format is never tested on a problem it trained in the other, and the two are compared on the same problems."""
    plain, keyed = get_task("constr7xp"), get_task("constr7xq")
    for split in ("train", "heldout", "beyond"):
        for i in range(100):
            a, b = plain.sample(split, i), keyed.sample(split, i)
            assert (b.task, b.answer, b.prompt) == ("constr7xq", a.answer, keyed.inner.render(plain.inner.parse(a.prompt)))
            assert split == "beyond" or plain.split_of(a.prompt) == keyed.split_of(b.prompt) == split


def test_draws_of_the_constr_formats_are_pinned():
    """Their prompts and answers are fixed for good (a name fixes a family's prompts): a refactor that changes a
    draw fails here (hashes of the first 50 samples of each split, taken when constr7xq came in)."""
    import hashlib

    def digest(name: str) -> str:
        t, h = get_task(name), hashlib.sha256()
        for split in ("train", "heldout", "beyond") if hasattr(t, "beyond") else ("train", "heldout"):
            for i in range(50):
                s = t.sample(split, i)
                h.update(f"{s.prompt}|{s.answer}|{t.verify(s.prompt, s.answer)}\n".encode())
        return h.hexdigest()[:16]
    assert {n: digest(n) for n in PINNED} == PINNED
