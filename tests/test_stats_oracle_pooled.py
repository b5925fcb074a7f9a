"""benchmarks/oracle_tpf.py: a family's oracle TPF and its ceiling over the prompts are ratios of sums (DESIGN
section 5: all tokens / all forwards, never the mean of per-prompt ratios, which over-weights short answers).
The script averaged the per-prompt TPFs, and these numbers are set beside trained bases' pooled TPFs
(docs/BENCHMARKS.md "Oracle TPF per task family")."""
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent


def oracle_tpf():
    spec = importlib.util.spec_from_file_location("oracle_tpf", ROOT / "benchmarks" / "oracle_tpf.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TwoLengths:
    """A single-answer family (no pattern of reference_answers matches: the reference is the one answer) of
    a 1-character answer and a 31-character one."""
    def sample(self, split, i):
        return SimpleNamespace(prompt=f"q{i}", answer="a" if i % 2 == 0 else "b" * 31)


def test_oracle_tpf_and_ceiling_are_ratios_of_sums(monkeypatch, capsys):
    # block 16, every token certain: "a"+EOS = 2 tokens, one block, 1 forward (TPF 2); 31 + EOS = 32 tokens, two
    # blocks, 2 denoising + 1 commit forward (TPF 32/3). Ratio of sums (2 + 32) / (1 + 3) = 8.50; the mean of
    # the two ratios would be 6.33. The ceiling (one forward per block + commits) is the same here.
    mod = oracle_tpf()
    monkeypatch.setattr(mod, "get_task", lambda name: TwoLengths())
    monkeypatch.setattr(sys, "argv", ["oracle_tpf.py", "--tasks", "two", "--limit", "2", "--thresholds", "0.9",
                                      "--block-len", "16"])
    mod.main()
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| two "))
    assert row == "| two | 2 | 1 | 100% / 8.50 | 8.50 |"
