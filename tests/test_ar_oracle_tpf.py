"""benchmarks/ar_oracle_tpf.py: the path-product threshold rule by hand, and the AR original's own
confidences from one uncached forward agreeing with its cached greedy decode."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ar_oracle_tpf", ROOT / "benchmarks" / "ar_oracle_tpf.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)


@pytest.mark.parametrize("conf,block,tau,forwards", [
    ([1.0, 1.0, 1.0, 1.0], 4, 0.9, 1),        # all sure: one forward per block
    ([0.5, 1.0, 1.0, 1.0], 4, 0.9, 2),        # forced commit of 0.5, then the sure rest: 0.5 * 1 < 0.9
    ([0.95] * 4, 4, 0.9, 2),                  # 0.95, 0.9025 commit; 0.857 does not
    ([0.95] * 4, 4, 0.95, 4),                 # only the first of each forward
    ([1.0] * 5, 4, 0.9, 2),                   # a block boundary ends a forward's commits
    ([1.0] * 5, 16, 0.9, 1),
    ([0.2, 0.2, 0.2], 4, 0.3, 3),
    ([], 4, 0.9, 0),
])
def test_product_rule_by_hand(conf, block, tau, forwards):
    assert mod.product_rule_forwards(conf, block, tau) == forwards


def test_greedy_confidences_match_the_cached_decode():
    from orl.checkpoint import load_checkpoint

    model, tok, _ = load_checkpoint(ROOT / "checkpoints" / "orl-tiny-ar")
    prefixes = [tok.encode("cumsum:877347649366134="), tok.encode("sort:b1,a2,e3,h3,f5=")]
    confs, disagree = mod.greedy_confidences(model.eval(), tok, prefixes, 24)
    assert disagree == 0
    assert [len(c) for c in confs] == [24, 6]  # long's sums run past 24 tokens; keysort's 5 letters + EOS
    assert all(0 < c <= 1 for cs in confs for c in cs)


def test_script_end_to_end_on_a_small_corpus(tmp_path):
    import json
    import subprocess
    import sys

    import torch
    from safetensors.torch import save_file

    from orl.tokenizer import CharTokenizer

    tok = CharTokenizer()
    ids = tok.encode("cumsum:8773476493=8,15,22,25,29,36,40,49,52,55\n" * 8)
    save_file({"code_heldout": torch.tensor(ids, dtype=torch.int32)}, str(tmp_path / "tokens.safetensors"))
    out = tmp_path / "r.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ar_oracle_tpf.py"), "--ar",
                    str(ROOT / "checkpoints" / "orl-tiny-ar"), "--corpus", str(tmp_path), "--windows", "3",
                    "--context", "12", "--tokens", "6", "--first", "2", "--out", str(out)], check=True,
                   capture_output=True, cwd=ROOT)
    r = json.loads(out.read_text())
    assert r["tokens"] == sum(map(len, r["confidences"])) and r["argmax_disagreements"] == 0
    assert set(r["tpf"]) == {"4", "16"} and set(r["tpf_first_2"]["4"]) == {"0.9", "0.7", "0.5", "0.3"}
    assert all(1 <= v <= 16 for b in r["tpf"].values() for v in b.values())
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ar_oracle_tpf.py"), "--ar", "x", "--corpus",
                          "y", "--thresholds", "0,0.5"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "thresholds in (0, 1]" in bad.stderr
