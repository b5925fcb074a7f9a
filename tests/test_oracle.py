"""orl.eval.oracle: threshold decoding on exact marginals, hand-computed cases."""
import pytest

from orl.eval.oracle import oracle_decode

EOS = "$"


def test_single_answer_commits_in_one_forward():
    r = oracle_decode({"ab": 1.0}, EOS)
    assert (r.tokens, r.n_tokens, r.forwards, r.valid) == (("a", "b", "$"), 3, 1, True) and r.tpf == 3.0


def test_two_blocks_cost_a_commit_forward():
    r = oracle_decode({"x" * 20: 1.0}, EOS, block_len=16)
    assert (r.n_tokens, r.forwards) == (21, 3)  # block 1, commit forward, block 2


def test_free_choice_waits_for_the_fallback():
    # "ab" or "ba": step 1 commits only the certain EOS tail; step 2 the lowest position's best token
    # (a tie, broken towards "a"); step 3 the now certain "b".
    r = oracle_decode({"ab": 1, "ba": 1}, EOS)
    assert (r.tokens, r.forwards, r.valid) == (("a", "b", "$"), 3, True)
    # a majority at tau commits at once, a smaller one waits
    assert oracle_decode({"a": 0.9, "b": 0.1}, EOS, tau=0.9).forwards == 1
    assert oracle_decode({"a": 0.8, "b": 0.2}, EOS, tau=0.9).forwards == 2


def test_answers_of_different_lengths_place_eos_by_mass():
    # "abc" (0.5) or "ab" (0.5): positions 0-1 certain, position 2 split between "c" and EOS; the
    # fallback picks by probability, then the EOS fill resolves the tail.
    r = oracle_decode({"abc": 1, "ab": 1}, EOS)
    assert r.valid and r.forwards == 2 and r.tokens in {("a", "b", "$"), ("a", "b", "c", "$")}


def test_inconsistent_parallel_commits_fail():
    # Two slots each put 0.5 on the same letter: at tau 0.5 both commit it in step 1 ("aa"), an answer
    # that does not exist; at tau 0.6 the fallback commits one slot and the other follows.
    answers = {"ab": 1, "ba": 1}
    r = oracle_decode(answers, EOS, tau=0.5)
    assert not r.valid and r.tokens == ("a", "a", "$") and r.forwards == 1
    assert oracle_decode(answers, EOS, tau=0.6).valid


def test_bad_input():
    with pytest.raises(ValueError):
        oracle_decode({}, EOS)
    with pytest.raises(ValueError):
        oracle_decode({"a": 1}, EOS, tau=0)


def test_oracle_benchmark_script():
    """benchmarks/oracle_tpf.py end to end: a single-answer family sits at its ceiling, a multi-answer
    one far below it, and every enumerated reference verifies (the script asserts it)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "oracle_tpf.py"
    out = subprocess.run([sys.executable, str(script), "--tasks", "split,keysort,prog", "--limit", "4",
                          "--thresholds", "0.9"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = {line.split("|")[1].strip(): line.split("|") for line in out.stdout.splitlines() if line.startswith("| ")}
    tpf = {k: float(v[4].split("/")[1]) for k, v in rows.items() if k in ("split", "keysort", "prog")}
    ceiling = {k: float(v[5]) for k, v in rows.items() if k in tpf}
    assert tpf["prog"] == ceiling["prog"] and rows["prog"][3].strip() == "1"
    assert tpf["split"] < ceiling["split"] / 2 and tpf["keysort"] < ceiling["keysort"] / 2
