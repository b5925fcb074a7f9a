"""benchmarks/decode_ladder.py: the paired rows by hand, the block-of-1 rung against the AR decoder on the
same weights, and the script end to end on the shipped base checkpoint."""
import importlib.util
from pathlib import Path

from orl.checkpoint import load_checkpoint
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.config import DecodeConfig
from orl.engine.engine import Engine
from orl.eval.records import read_records

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("decode_ladder", ROOT / "benchmarks" / "decode_ladder.py")
dl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dl)
BASE = ROOT / "checkpoints" / "orl-tiny-base"


def rec(i, ok, tokens=4, fwd=4, split="beyond"):
    return {"task": "long7xp", "split": split, "prompt_id": f"long7xp/{split}/{i}", "sample": 0, "verdict": ok,
            "decode": {"seed": 0}, "n_tokens": tokens, "finished": True, "forwards": {"step": fwd, "commit": 0}}


def test_rows_pair_each_rung_with_the_one_above():
    by_rung = {"ar": [rec(0, True), rec(1, True), rec(2, False), rec(3, True)],
               "thresh": [rec(0, True, fwd=1), rec(1, False, fwd=2), rec(2, True, fwd=1), rec(3, False, fwd=4)]}
    a, t = dl.ladder_rows(by_rung)
    assert (a["rung"], a["n"], a["acc"], a["tpf"]) == ("ar", 4, 75.0, 1.0) and "p" not in a
    assert (t["rung"], t["acc"], t["tpf"]) == ("thresh", 50.0, 16 / 8)  # ratio of sums, not a mean of 4, 2, 4, 1
    assert (t["lost"], t["gained"], t["p"]) == (2, 1, 1.0)               # 2 * (1 + 3) / 2^3 capped at 1
    assert "2 / 1" in dl.format_rows([a, t])


def test_block_of_one_is_the_ar_decoder_on_the_grid_and_not_in_prompt_block():
    """Blocks of one position read each token off the clean position before it (the shifted read-out): on
    the absolute grid the prompt is then causal too, and the engine is the AR decoder on the same weights.
    In prompt_block the prompt stays one bidirectional block, so the `ar` rung of a prompt_block base is
    AR order over a bidirectional prompt, not AR decoding (the ladder's docstring says so)."""
    model, tok, manifest = load_checkpoint(BASE)
    prompts = ["cumsum:3,1,4,1,5=", "sort:dcba="]
    engine = Engine(model, tok, manifest=manifest)
    ar = [g.text for g in ARDecoder(model, tok, manifest=manifest).generate(prompts, ARConfig(max_new_tokens=24))]
    out = {layout: engine.generate(prompts, DecodeConfig.from_manifest(manifest, block_len=1, max_new_tokens=24,
                                                                        layout=layout))
           for layout in ("absolute_grid", "prompt_block")}
    assert [g.text for g in out["absolute_grid"]] == ar
    assert [g.text for g in out["prompt_block"]] != ar
    assert all(g.forwards == g.n_tokens for g in out["absolute_grid"])  # one forward per token


def test_script_end_to_end(tmp_path, capsys):
    out = tmp_path / "ladder.jsonl"
    dl.main(["--model", str(BASE), "--tasks", "long7", "--splits", "heldout", "--limit", "2",
             "--max-new-tokens", "32", "--out", str(out)])
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[2] for line in table[1:]] == ["ar_grid", "ar", "l2r", "topk", "thresh"]
    recs = read_records(out)
    assert len(recs) == 10
    by_rule = {(r["decode"]["rule"], r["decode"]["block_len"], r["decode"]["layout"]) for r in recs}
    assert by_rule == {("threshold", 1, "absolute_grid"), ("threshold", 1, "prompt_block"),
                       ("fast_dllm_v2", 16, "prompt_block"), ("topk", 16, "prompt_block"), ("threshold", 16, "prompt_block")}
    # one per forward never commits two tokens in one forward; left to right neither, except the block's
    # first token, which Fast-dLLM v2 reads off the clean position before it as the block opens
    fwd = {r["decode"]["rule"]: [] for r in recs}
    for r in recs:
        fwd[r["decode"]["rule"]].append(r["n_tokens"] - r["forwards"]["step"] - r["forwards"]["commit"])
    assert max(fwd["topk"]) <= 0 and 0 < max(fwd["fast_dllm_v2"]) <= 32 // 16


def test_versus_pairs_two_checkpoints_rung_by_rung():
    mine = {"ar": [rec(0, True), rec(1, True), rec(2, False)], "thresh": [rec(0, False), rec(1, True), rec(2, False)]}
    other = {"ar": [rec(0, True), rec(1, False), rec(2, False)], "thresh": [rec(0, True), rec(1, True), rec(2, True)]}
    ar, th = dl.versus_rows(mine, other)
    assert (ar["rung"], ar["only_a"], ar["only_b"]) == ("ar", 1, 0)
    assert abs(ar["acc_a"] - 200 / 3) < 1e-9 and abs(ar["acc_b"] - 100 / 3) < 1e-9
    assert (th["rung"], th["only_a"], th["only_b"], th["p"]) == ("thresh", 0, 2, 0.5)
    assert "1 / 0" in dl.format_versus([ar, th], "base", "orl")
    other["ar"] = other["ar"][:2]  # a prompt missing on one side is refused, not silently dropped
    try:
        dl.versus_rows(mine, other)
    except SystemExit as e:
        assert "different prompts" in str(e)
    else:
        raise AssertionError("unpaired prompts were accepted")


def test_script_vs_a_second_checkpoint(tmp_path, capsys):
    out = tmp_path / "ladder.jsonl"
    dl.main(["--model", str(BASE), "--vs", str(ROOT / "checkpoints" / "orl-tiny-orl"), "--tasks", "long7",
             "--splits", "heldout", "--limit", "2", "--max-new-tokens", "32", "--rungs", "ar_grid,thresh",
             "--out", str(out)])
    text = capsys.readouterr().out
    versus = text.split("rung by rung:\n")[1].splitlines()
    assert [line.split()[2] for line in versus[1:]] == ["ar_grid", "thresh"]
    assert {r["model"]["name"] for r in read_records(out)} == {"orl-tiny-base", "orl-tiny-orl"}
