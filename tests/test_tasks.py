"""orl.eval.tasks: generators, verifiers, the program interpreter, splits and the registry."""
from __future__ import annotations

import itertools
import random
import re
import string
from functools import lru_cache

import pytest

from orl.eval.tasks import (BEYOND, HELPERS, SPLITS, SUITE, SUITE_V5, SUITE_V7, TASKS, Sample, get_task, make_samples,
                            run_program, task_names)
from orl.eval.tasks.arithmetic import Add
from orl.eval.tasks.constraints import Constr
from orl.eval.tasks.keysort import KeySort
from orl.eval.tasks.long import Long
from orl.eval.tasks.programs import Prog, ProgramError, program_output
from orl.eval.tasks.sorting import Sort
from orl.eval.tasks.split import Split
from orl.tokenizer import CharTokenizer

NAMES = ["split", "keysort", "prog", "constr", "long"]
ALL = NAMES + ["add", "sort"]
N_SPLIT = 3000


@lru_cache(maxsize=None)
def samples(name: str, split: str, n: int = N_SPLIT) -> tuple[Sample, ...]:
    return tuple(get_task(name).sample(split, i) for i in range(n))


def references(name: str, n: int = 200) -> list[Sample]:
    """n samples from each split: 400 per family, above the 300 the acceptance checks need."""
    return [s for split in SPLITS for s in samples(name, split)[:n]]


def change_char(text: str, i: int, rng: random.Random) -> str:
    c = text[i]
    pool = string.digits if c.isdigit() else string.ascii_lowercase if c.isalpha() else string.digits + "-,"
    return text[:i] + rng.choice([p for p in pool if p != c]) + text[i + 1:]


def test_registry_names_and_unknown_task():
    assert task_names() == NAMES  # what "all" means: the suite the shipped base was trained on
    assert sorted(TASKS) == sorted(ALL + list(SUITE_V7) + list(V7X) + ["split7xp", "constr7xp", "constr7xq", "keysort7x", "split7xph", "constr7xph", "keysort7xh", "split7xps", "split7xpc", "constr7xpe", "constr7xqh"] + [h.name for h in HELPERS] + ["prog7xph", "long7xph", "long7xpo", "long7xpf", "prog7xpf"])
    assert set(SUITE_V5) <= set(TASKS)
    assert all(TASKS[n].name == n and get_task(n) is TASKS[n] for n in ALL)
    with pytest.raises(ValueError) as e:
        get_task("nope")
    assert all(n in str(e.value) for n in ALL)


@pytest.mark.parametrize("name", ALL)
def test_verifier_accepts_reference(name):
    task = get_task(name)
    refs = references(name)
    assert len(refs) >= 300
    for s in refs:
        assert s.task == name and task.verify(s.prompt, s.answer), s
        # Trailing whitespace (e.g. a newline before EOS) is not the model's fault.
        assert task.verify(s.prompt, s.answer + " \n")


@pytest.mark.parametrize("name", ["add", "sort", "prog", "long"])
def test_single_answer_verifier_rejects_corruptions(name):
    task, rng = get_task(name), random.Random(0)
    for s in references(name):
        a = s.answer
        i = rng.randrange(len(a))
        swapped = a[::-1] if a != a[::-1] else a + a  # reordering alone must be caught too
        for bad in (change_char(a, i, rng), a[:i] + a[i + 1:], a + "7", a + "x", " " + a, "", swapped):
            assert not task.verify(s.prompt, bad), (s, bad)


def test_split_accepts_every_pair_and_rejects_near_misses():
    task = get_task("split")
    p = "?+?=347"
    valid = {f"{x:03d}+{y:03d}" for x in range(1000) for y in range(1000) if task.verify(p, f"{x:03d}+{y:03d}")}
    assert valid == {f"{x:03d}+{347 - x:03d}" for x in range(348)}  # carries too, not only references
    for bad in ("120+226", "12+335", "120+0227", "120-227", "120+227+", "+347", "347", "", "12a+227", "227 120"):
        assert not task.verify(p, bad), bad
    assert task.verify("?+?=047", "000+047") and not task.verify("?+?=047", "00+047")
    assert task.canonical("?+?=047") == task.canonical("?+?=47")
    # References split digit by digit (no borrows) and vary: 5 * 6 * 9 of them for 458.
    rng = random.Random(0)
    for _ in range(200):
        prompt, answer = Split().generate(rng)
        x, y = answer.split("+")
        assert all(int(a) + int(b) == int(d) for a, b, d in zip(x, y, prompt[4:])), (prompt, answer)
    by_prompt: dict[str, set[str]] = {}
    for s in samples("split", "train"):
        by_prompt.setdefault(s.prompt, set()).add(s.answer)
    assert max(len(v) for v in by_prompt.values()) >= 5


def test_keysort_accepts_every_tie_order_and_rejects_the_rest():
    task = get_task("keysort")
    p = "sort:c3,a1,b3,d2,e3="
    valid = {"".join(t) for t in itertools.permutations("abcde") if task.verify(p, "".join(t))}
    assert valid == {"ad" + "".join(t) for t in itertools.permutations("bce")}
    for bad in ("adbc", "adbcee", "adbcf", "dabce", "adbbe", "a,d,b,c,e", "ADBCE", ""):
        assert not task.verify(p, bad), bad
    assert task.canonical(p) == task.canonical("sort:e3,d2,b3,a1,c3=")
    with pytest.raises(ValueError, match="distinct letters"):
        task.verify("sort:a1,a2=", "aa")
    refs = samples("keysort", "train")
    assert all(re.fullmatch(r"sort:[a-j][1-5](,[a-j][1-5]){4,7}=", s.prompt) for s in refs)
    tied = [s for s in refs[:300] if len(set(s.prompt[6:-1:3])) < len(s.answer)]
    assert len(tied) > 250  # 5-8 records over 5 keys: nearly every list has a tie
    # tie groups come out in both orders for the same records (two records, one key: 45 letter pairs)
    rng, by_records = random.Random(0), {}
    for _ in range(500):
        prompt, answer = KeySort(min_len=2, max_len=2, max_key=1).generate(rng)
        by_records.setdefault(task.canonical(prompt), set()).add(answer)
    assert sum(len(v) == 2 for v in by_records.values()) >= 30


def test_constr_rejects_corruptions():
    task, rng = get_task("constr"), random.Random(0)
    for s in references("constr"):
        a = s.answer
        i = rng.randrange(len(a) - 1)
        # Copying a neighbour breaks both variants (duplicate digit / equal neighbours); changing one
        # digit of the sum variant breaks the sum; dropping or adding a character breaks the length.
        bad = [a[:i] + a[i + 1] + a[i + 1:], a[:i] + a[i + 1:], a + a[-1], a + "x"]
        if a.isdigit():
            bad.append(change_char(a, i, rng))
        for b in bad:
            assert not task.verify(s.prompt, b), (s, b)


def test_constr_accepts_several_valid_answers_and_rejects_near_misses():
    task = get_task("constr")
    p = "4 distinct digits sum 17 incl 5:"
    for good in ("9215", "5129", "0539", "5138", "8405"):
        assert task.verify(p, good), good
    for bad in ("5552", "1268", "5129 0", "512", "51290", "9216", "5a29", "-5129"):
        assert not task.verify(p, bad), bad
    p = "7 of abc, 2 c, no equal neighbours:"
    for good in ("ababcbc", "cabcaba", "bcbabca", "acabacb"):
        assert task.verify(p, good), good
    for bad in ("abbacbc", "abababa", "ababcbcc", "abcbcbc", "abadcbc", "ababcb"):
        assert not task.verify(p, bad), bad
    p = "6 of aeg, e to a, no equal neighbours:"
    for good in ("egegea", "eaeaga", "egagea", "eagaga"):
        assert task.verify(p, good), good
    for bad in ("egegaa", "aegega", "egegeg", "egege", "egegega", "ebegea", "eggega", ""):
        assert not task.verify(p, bad), bad
    p = "arrange aabbbcc, no equal neighbours:"
    for good in ("bcbabca", "babcacb", "bacbcab", "cbabacb"):
        assert task.verify(p, good), good
    for bad in ("abbcbca", "bcbabc", "bcbabcaa", "bcbabcb", "bcbadca", "aabbbcc", ""):
        assert not task.verify(p, bad), bad


def test_constr_verifier_matches_brute_force_and_references_vary():
    task = get_task("constr")
    p = "3 distinct digits sum 6 incl 0:"  # {0,1,5}, {0,2,4} in any order
    valid = {"".join(t) for t in itertools.product(string.digits, repeat=3) if task.verify(p, "".join(t))}
    assert valid == {"".join(q) for s in ("015", "024") for q in itertools.permutations(s)}
    p = "5 of abc, 2 a, no equal neighbours:"
    valid = {"".join(t) for t in itertools.product("abc", repeat=5) if task.verify(p, "".join(t))}
    assert valid == {w for w in map("".join, itertools.product("abc", repeat=5))
                     if w.count("a") == 2 and "aa" not in w and "bb" not in w and "cc" not in w}
    p = "arrange aabbc, no equal neighbours:"
    valid = {"".join(t) for t in itertools.product("abcd", repeat=5) if task.verify(p, "".join(t))}
    assert valid == {w for w in map("".join, itertools.permutations("aabbc"))
                     if "aa" not in w and "bb" not in w}
    assert len(valid) == 12
    p = "5 of abc, b to a, no equal neighbours:"
    valid = {"".join(t) for t in itertools.product("abcd", repeat=5) if task.verify(p, "".join(t))}
    assert valid == {w for w in map("".join, itertools.product("abc", repeat=5))
                     if w[0] == "b" and w[-1] == "a" and "aa" not in w and "bb" not in w and "cc" not in w}
    assert len(valid) == 5
    # The references are drawn from all valid answers, not one canonical answer per prompt.
    by_prompt: dict[str, set[str]] = {}
    for s in samples("constr", "train"):
        by_prompt.setdefault(s.prompt, set()).add(s.answer)
    assert max(len(v) for v in by_prompt.values()) >= 5


@pytest.mark.parametrize("src,value", [
    ("a=3;b=a+4;a=b*2;a?", 14),  # the interpreter keeps * even though the default generator leaves it out
    ("a=3;b=a+4;a=b*2;b?", 7),
    ("a=2+3*4;a?", 14),
    ("a=9-2-3;a?", 4),
    ("x=5;y=x*x-x;y?", 20),
    ("a=1;a=a+1;a=a*a;a?", 4),
    ("c=2;b=c-7;b?", -5),
    ("n=12*10;m=n-n*2;m?", -120),
])
def test_interpreter_hand_written(src, value):
    assert run_program(src) == value
    assert get_task("prog").verify(src, str(value))
    assert not get_task("prog").verify(src, str(value + 1))


@pytest.mark.parametrize("src", ["a=1;b?", "a=b+1;a?", "a=1;a", "a=1+;a?", "a=1 2;a?", "a=(1);a?",
                                 "a?", "a=1;a=2**3;a?", "A=1;A?", "a=__import__;a?"])
def test_interpreter_rejects_malformed(src):
    with pytest.raises(ProgramError):
        run_program(src)


def test_add_format_is_reversed_with_trailing_sign():
    task = get_task("add")
    assert task.verify("347+85=", "234")
    assert not task.verify("347+85=", "432")
    assert task.verify("85-347=", "262-")
    assert not task.verify("85-347=", "-262")
    assert task.verify("50-50=", "0") and not task.verify("50-50=", "00") and not task.verify("50-50=", "0-")
    assert task.verify("990+10=", "0001") and not task.verify("990+10=", "00010")
    assert task.canonical("85+347=") == task.canonical("347+85=") != task.canonical("85-347=")


def test_equivalent_prompts_share_a_split():
    rng = random.Random(0)
    add, sort = get_task("add"), get_task("sort")
    for s in samples("add", "heldout")[:300]:
        a, b = s.prompt[:-1].replace("-", "+").split("+")
        if "+" in s.prompt:
            assert add.split_of(f"{b}+{a}=") == "heldout"
    for s in samples("sort", "heldout")[:300]:
        items = s.prompt[5:-1].split(",")
        rng.shuffle(items)
        assert sort.split_of(f"sort:{','.join(items)}=") == "heldout"
    keysort, split = get_task("keysort"), get_task("split")
    for s in samples("keysort", "heldout")[:300]:
        items = s.prompt[5:-1].split(",")
        rng.shuffle(items)
        assert keysort.split_of(f"sort:{','.join(items)}=") == "heldout"
    for s in samples("split", "heldout")[:300]:  # N with or without its zero padding
        assert split.split_of(f"?+?={int(s.prompt[4:])}") == "heldout"


def test_prog_intermediate_values_are_bounded():
    for s in samples("prog", "train")[:500]:
        statements = s.prompt[len("echo "):-1].split(";")
        assert 3 <= len(statements) <= 5
        # Each prefix program, queried at its last target, gives one intermediate value: the echo.
        values = [run_program(";".join(statements[:k]) + f";{statements[k - 1][0]}?")
                  for k in range(1, len(statements) + 1)]
        names = [st.split("=", 1)[0] for st in statements]
        assert all(0 <= v <= 99 for v in values), s
        # The default chains: every statement after the first uses the variable assigned just before.
        assert all(prev[0] in st.split("=", 1)[1] for prev, st in zip(statements, statements[1:])), s
        assert s.answer == ",".join(f"{n}={v}" for n, v in zip(names, values)), s


@pytest.mark.parametrize("src,out", [
    ("echo a=3;b=a+4;a=b-9:", "a=3,b=7,a=-2"),
    ("echo c=0;c=c-0:", "c=0,c=0"),
    ("echo a=5;b=a-a;b=b-a;a=b+b:", "a=5,b=0,b=-5,a=-10"),
    ("echo x=2;y=x*x-x:", "x=2,y=2"),
])
def test_prog_echo_prints_every_assignment(src, out):
    task = get_task("prog")
    assert program_output(src) == out and task.verify(src, out)
    for bad in (out + ",", out.replace(",", ";"), out.rsplit(",", 1)[0], "0" + out, out + "0", "",
                out.replace("=", ""), "z" + out[1:]):
        assert not task.verify(src, bad), bad
    assert not task.verify(src, out.replace("-", "-0")) or "-" not in out
    with pytest.raises(ProgramError):
        program_output("echo a=1;b=c:")


def test_sort_and_long_examples():
    assert get_task("sort").verify("sort:5,2,9,1,2=", "1,2,2,5,9")
    assert not get_task("sort").verify("sort:5,2,9,1,2=", "1,2,5,9")
    # Numerical, not character order: 7 < 15 < 42.
    assert get_task("sort").verify("sort:42,7,91,7,15=", "7,7,15,42,91")
    for bad in ("15,42,7,7,91", "7,15,42,91", "7,7,15,42,91,", "07,7,15,42,91", "7,7,1,5,42,91"):
        assert not get_task("sort").verify("sort:42,7,91,7,15=", bad), bad
    assert get_task("long").verify("cumsum:314159265358979=", "3,4,8,9,14,23,25,31,36,39,44,52,61,68,77")


@pytest.mark.parametrize("name", ALL)
def test_splits_are_disjoint(name):
    task = get_task(name)
    train, held = samples(name, "train"), samples(name, "heldout")
    assert all(s.split == "train" for s in train) and all(s.split == "heldout" for s in held)
    assert not {s.prompt for s in train} & {s.prompt for s in held}
    # Equivalent rewrites (b+a, permuted lists) stay on the held-out side too.
    assert not {task.canonical(s.prompt) for s in train} & {task.canonical(s.prompt) for s in held}
    assert len({s.prompt for s in held}) > 20  # the held-out side is not degenerate


@pytest.mark.parametrize("name", ALL)
def test_determinism(name):
    fresh = type(get_task(name))()  # no hidden state on the registry's instance
    for split in SPLITS:
        for i in (0, 1, 17, 2999):
            assert fresh.sample(split, i) == samples(name, split)[i]
    assert len({s.prompt for s in samples(name, "train")[:100]}) > 30


def test_make_samples_interleaves_and_reproduces():
    out = make_samples("all", "train", 12, seed=3)
    assert [s.task for s in out] == NAMES * 2 + NAMES[:2]
    assert out == make_samples("all", "train", 12, seed=3)
    assert all(get_task(s.task).sample("train", s.index) == s for s in out)
    other = make_samples("all", "train", 12, seed=4)
    assert not {s.index for s in out} & {s.index for s in other} and out != other
    assert [s.task for s in make_samples(["long", "add"], "heldout", 4)] == ["long", "add"] * 2
    assert [s.task for s in make_samples("sort", "train", 3)] == ["sort"] * 3
    with pytest.raises(ValueError):
        make_samples(["add", "nope"], "train", 2)
    with pytest.raises(ValueError):
        make_samples("all", "test", 2)


@pytest.mark.parametrize("name", ALL)
def test_encodes_and_fits_length_limits(name):
    tok = CharTokenizer()
    for split in SPLITS:
        for s in samples(name, split):
            assert tok.decode(tok.encode(s.prompt)) == s.prompt and tok.decode(tok.encode(s.answer)) == s.answer
            assert len(s.prompt) <= 40
            if name == "long":
                assert len(s.answer) >= 33 and re.fullmatch(r"cumsum:[1-9]{15}=", s.prompt)
            elif name == "prog":  # three to five echoed "x=value": one or two blocks
                assert 11 <= len(s.answer) <= 29
            else:
                assert 1 <= len(s.answer) <= 15


def test_knobs_change_difficulty_and_are_validated():
    rng = random.Random(0)
    assert all(len(Add(min_digits=4, max_digits=4).generate(rng)[0]) == 10 for _ in range(20))
    assert all(Sort(min_len=8, max_len=8).generate(rng)[1].count(",") == 7 for _ in range(20))
    assert all(len(Sort(min_len=3, max_len=3, max_digits=1).generate(rng)[1]) == 5 for _ in range(20))
    assert all(Prog(min_assign=4, max_assign=4).generate(rng)[0].count("=") == 4 for _ in range(20))
    assert all(len(Constr(variants=("word",), min_word=9, max_word=9).generate(rng)[1]) == 9 for _ in range(20))
    assert all("distinct digits" in Constr(variants=("sum",)).generate(rng)[0] for _ in range(20))
    assert all(" to " in Constr().generate(rng)[0] for _ in range(50))
    assert {Constr(variants=("word", "arrange")).generate(rng)[0].split()[0] for _ in range(50)} >= {"arrange", "7"}
    for _ in range(50):  # the v4 programs: any defined variable as operand, negative values allowed
        prompt, answer = Prog(operands="any", signed=True).generate(rng)
        assert Prog().verify(prompt, answer)
    query = Prog(form="query")
    for _ in range(20):
        prompt, answer = query.generate(rng)
        assert prompt.endswith("?") and query.verify(prompt, answer) and run_program(prompt) == int(answer)
    assert all(Long(n_digits=20).generate(rng)[0].count(",") == 0 for _ in range(5))
    assert all(Long(n_digits=20).generate(rng)[1].count(",") == 19 for _ in range(5))
    assert all(len(Split(min_digits=4, max_digits=4).generate(rng)[1]) == 9 for _ in range(20))
    assert all(len(KeySort(min_len=10, max_len=10).generate(rng)[1]) == 10 for _ in range(20))
    assert all(set(KeySort(max_key=1).generate(rng)[0][6:-1:3]) == {"1"} for _ in range(20))
    for bad in (lambda: Add(min_digits=3, max_digits=2), lambda: Sort(max_digits=0), lambda: Split(min_digits=0),
                lambda: KeySort(max_len=11), lambda: KeySort(max_key=10),
                lambda: Prog(ops="/"), lambda: Prog(form="print"), lambda: Prog(operands="last"), lambda: Constr(variants=("xor",)), lambda: Long(n_digits=0)):
        with pytest.raises(ValueError):
            bad()


def test_add_operands_are_zero_padded_and_prog_default_has_no_products():
    rng = random.Random(0)
    for _ in range(50):
        prompt, answer = Add().generate(rng)
        assert len(prompt) == 8 and prompt[3] in "+-" and Add().verify(prompt, answer)
        assert "*" not in Prog().generate(rng)[0]
    assert Add().verify("085-347=", "262-") and Add().verify("85-347=", "262-")


# ---- tasks v7: length-varied families and the `beyond` split ----

V7X = ("long7x", "prog7x", "long7xp", "prog7xp")  # the index-hinted long7 and prog7 (tasks/hinted.py)


def size(name: str, prompt: str) -> int:
    """What "size" counts per v7 family (orl/eval/tasks/__init__.py), read back from the prompt."""
    if name == "long7":
        return len(re.fullmatch(r"cumsum:([1-9]+)=", prompt)[1])
    if name in ("long7x", "long7xp"):
        return len(re.fullmatch(r"cumsum:((?:[a-zA-Z][1-9])+)=[a-zA-Z]?", prompt)[1]) // 2
    if name in ("prog7x", "prog7xp"):
        return prompt.count("=")
    if name == "keysort7":
        return prompt.count(",") + 1
    if name == "prog7":
        return prompt.count("=")
    if name == "constr7":
        return int(prompt.split()[0])
    return len(re.fullmatch(r"\?\+\?=([1-9][0-9]*)", prompt)[1])  # split7: N is not zero-padded


def test_shipped_suite_prompts_unchanged():
    """The shipped checkpoints were trained and are tested on these exact prompts: the new knobs'
    defaults must draw the same ones (values pinned from the code before the knobs existed)."""
    got = {n: get_task(n).sample("heldout", 7) for n in SUITE}
    assert got["split"].prompt == "?+?=627" and got["split"].answer == "200+427"
    assert got["keysort"].prompt == "sort:b4,i4,e2,a3,h2,j2,f2,g2=" and got["keysort"].answer == "jehfgabi"
    assert got["long"].prompt == "cumsum:134352338854159="
    assert got["constr"].prompt == "6 of bde, b to e, no equal neighbours:"


@pytest.mark.parametrize("name", SUITE_V7 + V7X)
def test_v7_sizes_cover_the_range_and_beyond_is_disjoint(name):
    task = get_task(name)
    lo, hi = task.sizes
    blo, bhi = task.beyond
    assert hi < blo  # beyond means longer than anything trained on
    inside = [size(name, s.prompt) for split in SPLITS for s in samples(name, split, 600)]
    assert all(task.size(s.prompt) == size(name, s.prompt) for s in samples(name, "heldout", 100))
    assert set(inside) == set(range(lo, hi + 1))  # every size in the range is drawn, nothing else
    beyond = samples(name, BEYOND, 300)
    assert all(s.split == BEYOND for s in beyond)
    assert set(size(name, s.prompt) for s in beyond) == set(range(blo, bhi + 1))
    assert not {s.prompt for s in beyond} & {s.prompt for s in samples(name, "train")}


@pytest.mark.parametrize("name", SUITE_V7 + V7X)
def test_v7_verifier_judges_every_size(name):
    task, rng = get_task(name), random.Random(1)
    for split in SPLITS + (BEYOND,):
        for s in samples(name, split, 300):
            assert task.verify(s.prompt, s.answer), s
            if name in ("long7", "prog7") + V7X:  # one answer: any changed, dropped or extra character is wrong
                i = rng.randrange(len(s.answer))
                for bad in (change_char(s.answer, i, rng), s.answer[:i] + s.answer[i + 1:], s.answer + ",1"):
                    assert not task.verify(s.prompt, bad), (s, bad)
    # A correct answer for the wrong length is wrong: the trained answer length does not pass.
    assert not get_task("long7").verify("cumsum:1111111111111111111111=", ",".join(map(str, range(1, 21))))
    assert get_task("long7").verify("cumsum:1111111111111111111111=", ",".join(map(str, range(1, 23))))


@pytest.mark.parametrize("name", SUITE_V7 + V7X)
def test_v7_determinism_and_hash_split(name):
    import copy

    from orl.eval.tasks.sized import Sized

    task = get_task(name)
    fresh = Sized(name, copy.deepcopy(task.inner), copy.deepcopy(task.outer), task.sizes, task.beyond, task.unit)
    for split in SPLITS + (BEYOND,):
        for i in (0, 17, 299):
            assert fresh.sample(split, i) == samples(name, split, 300)[i]
    train, held = samples(name, "train", 1000), samples(name, "heldout", 1000)
    assert not {task.canonical(s.prompt) for s in train} & {task.canonical(s.prompt) for s in held}


@pytest.mark.parametrize("name", SUITE_V7 + V7X)
def test_v7_fits_the_context(name):
    """Prompt + the eval's 112-token answer budget fit tiny_model7's 192 positions; every answer + EOS
    fits that budget, and in-range answers fit the 80 tokens training rollouts use."""
    tok = CharTokenizer()
    for split, budget in (("train", 80), ("heldout", 80), (BEYOND, 112)):
        for s in samples(name, split, 300):
            assert tok.decode(tok.encode(s.prompt + s.answer)) == s.prompt + s.answer
            assert len(s.prompt) + 112 <= 192 and len(s.answer) + 1 <= budget, s


def test_beyond_needs_a_length_varied_family():
    with pytest.raises(ValueError, match="no 'beyond' split"):
        get_task("long").sample(BEYOND, 0)
    with pytest.raises(ValueError, match="unknown split"):
        get_task("long7").sample("test", 0)
    assert [s.task for s in make_samples(list(SUITE_V7), BEYOND, 5)] == list(SUITE_V7)


def test_v7_knobs_validated():
    from orl.eval.tasks.sized import Sized

    with pytest.raises(ValueError, match="overlap"):
        Sized("x", Long(4, 20), Long(20, 28), (4, 20), (20, 28), "digits")
    with pytest.raises(ValueError, match="same family"):
        Sized("x", Long(4, 20), Split(6, 7), (4, 20), (21, 28), "digits")
    for bad in (lambda: Long(5, 4), lambda: KeySort(letters="aab"), lambda: KeySort(max_len=4, letters="abc")):
        with pytest.raises(ValueError):
            bad()
    rng = random.Random(0)
    assert {len(Split(2, 5, pad=False).generate(rng)[0]) for _ in range(200)} == {6, 7, 8, 9}
