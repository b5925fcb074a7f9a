"""`orl bench` end to end on tiny random checkpoints: one table with a row for every system (n/a rows
saying why), ratios to (a) consistent with the printed columns, appended runs, and the shared
prompt set. Random models answer nothing right; accuracy 0 is expected."""
from __future__ import annotations

import re

import pytest

from orl.checkpoint import save_checkpoint
from orl.cli import main
from orl.eval.bench import COLUMNS, LABELS, BenchSpec, run_bench
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model
from test_ar import tiny_ar

TOK = CharTokenizer()


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    V = TOK.vocab_size
    return {
        "base": save_checkpoint(random_model(0, vocab_size=V, adapter_dim=0), TOK, d / "base", {"block_len": 8}),
        # the shifted read-out: a base that can draft for its own AR path ((i), (j))
        "base_shift": save_checkpoint(random_model(0, vocab_size=V, adapter_dim=0, shift_logits=True), TOK,
                                      d / "base_shift", {"block_len": 8}),
        "orl": save_checkpoint(random_model(1, vocab_size=V), TOK, d / "orl",
                               {"block_len": 8, "residual_mode": "adapter"}),
        "ar": save_checkpoint(tiny_ar(False), TOK, d / "ar"),
        "ar_lp": save_checkpoint(tiny_ar(False, learned_pos=True), TOK, d / "ar_lp"),
    }


def parse_tables(text: str) -> list[dict[str, list[str]]]:
    """Each markdown table in text -> {row label: cells after the label}."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("| system |"):
            assert [c.strip() for c in line.strip("|").split("|")] == list(COLUMNS)
            current = {}
            tables.append(current)
        elif line.startswith("| (") and current is not None:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            assert len(cells) == len(COLUMNS), line
            current[cells[0]] = cells[1:]
    return tables


def close(ratio: str, num: str, den: str, digits: float = 2e-3) -> bool:
    want = float(num) / float(den)
    return abs(float(ratio) - want) <= digits * max(1.0, want) + 1e-3  # 4 significant digits in the columns


def test_bench_table_has_every_system_and_consistent_ratios(ckpts, tmp_path, capsys):
    out = tmp_path / "bench.md"
    args = ["bench", "--tasks", "add,sort", "--limit", "2", "--max-new-tokens", "16", "--threshold", "0.5",
            "--out", str(out)]
    assert main(args + ["--base", str(ckpts["base_shift"]), "--orl", str(ckpts["orl"]), "--ar", str(ckpts["ar"]),
                        "--self-spec-tokens", "4"]) == 0
    # a second run appends its own table
    assert main(args + ["--base", str(ckpts["base"]), "--ar", str(ckpts["ar_lp"])]) == 0
    text = out.read_text()
    assert text.count("## orl bench") == 2 and capsys.readouterr().out.count("## orl bench") == 2
    full, partial = parse_tables(text)
    assert list(full) == list(LABELS.values())
    a = full[LABELS["a"]]
    col = {name: i - 1 for i, name in enumerate(COLUMNS)}
    assert full.pop(LABELS["l"])[0] == "n/a: no --drafter given"  # (l): tests/test_bench.py::test_drafter_system...
    for label, cells in full.items():
        assert cells[col["n"]] == "4"  # 2 prompts x 2 tasks, the same for every system
        assert re.fullmatch(r"\d+\.\d", cells[col["acc %"]])  # one unit: percent, one decimal
        assert float(cells[col["latency p90 s"]]) >= float(cells[col["latency p50 s"]]) > 0
        assert float(cells[col["TPF noEOS"]]) <= float(cells[col["TPF"]])
        for ratio, metric in (("tok/s vs (a)", "tok/s mean (batch 1)"), ("p50 vs (a)", "latency p50 s")):
            assert close(cells[col[ratio]], cells[col[metric]], a[col[metric]]), (label, ratio, cells)
        # TPF is shown with 2 decimals: its ratio agrees to their rounding
        assert close(cells[col["TPF vs (a)"]], cells[col["TPF"]], a[col["TPF"]], 0.02), (label, cells)
    assert all(float(a[col[r]]) == 1.0 for r in ("tok/s vs (a)", "TPF vs (a)", "p50 vs (a)"))
    for ar in ("e", "f"):  # one forward per token, by definition
        assert float(full[LABELS[ar]][col["TPF"]]) == 1.0
    # (i) and (j) decode the same tokens (the base's AR path): tests/test_bench.py::test_self_spec_systems
    assert list(partial) == list(LABELS.values())
    assert partial[LABELS["b"]][0] == "n/a: no --orl given"
    assert partial[LABELS["f"]][0].startswith("n/a: no plain transformers model") and "learned_pos" in partial[LABELS["f"]][0]
    assert partial[LABELS["e"]][col["TPF"]] == "1.00"
    assert partial[LABELS["i"]][0] == partial[LABELS["j"]][0] == partial[LABELS["k"]][0] == "n/a: --self-spec-tokens 0"
    assert "Peers: (a), (c) and (d)" in text and "Why a loop can match or beat dlmrt on a CPU" in text


def test_bench_rows_and_settings(ckpts):
    rows, table = run_bench(BenchSpec(base=str(ckpts["base"]), tasks=["add"], limit=2, max_new_tokens=8))
    assert set(rows) == {"a", "c", "d"} and rows["a"]["vs_a"]["tokens_per_s"] == 1.0
    for r in rows.values():
        assert r["n"] == 2 and r["vs_a"]["tpf"] == pytest.approx(r["tpf"] / rows["a"]["tpf"])
    assert "n/a: no --ar given" in table and "warm-up excluded" in table
    # ratio of sums over the prompts' records, not the mean of per-prompt TPF
    assert rows["a"]["tpf"] >= 0 and "tpf_sample_mean" in rows["a"] and "tpf_no_eos" in rows["a"]
    low = [f"({k})" for k, r in rows.items() if r["tpf"] < 1]
    assert ("TPF < 1 (" + ", ".join(low) + ")" in table) if low else "TPF < 1" not in table
    with pytest.raises(ValueError, match="threshold"):
        run_bench(BenchSpec(base=str(ckpts["base"]), threshold=0.0))
    with pytest.raises(ValueError, match="multiple of the number of blocks"):
        run_bench(BenchSpec(base=str(ckpts["base"]), max_new_tokens=16, ref_steps=3))


def test_self_spec_systems(ckpts):
    """(i), (j) and (k) emit the same tokens as the base's own AR decoding;
    a base that cannot draft for itself gets n/a rows that say why, not a failed run."""
    from orl.engine import Engine
    from orl.engine.ar import ARConfig, ARDecoder
    from orl.eval.bench import _self_spec

    engine = Engine.from_checkpoint(str(ckpts["base_shift"]))
    systems = _self_spec(engine, BenchSpec(base="", self_spec_tokens=4, max_new_tokens=16))
    plain = ARDecoder(engine.model, engine.tokenizer, manifest=engine.manifest)
    for prompt in ("12+34=", "sort:cba="):
        want = plain.generate(prompt, ARConfig(max_new_tokens=16))[0].token_ids
        i, j, k = systems["i"](prompt), systems["j"](prompt), systems["k"](prompt)
        assert i.token_ids == j.token_ids == k.token_ids == want
    no_k = _self_spec(engine, BenchSpec(base="", self_spec_tokens=4, self_spec_groups=0))
    assert no_k["k"] == "n/a: --self-spec-groups 0"
    unshifted = _self_spec(Engine.from_checkpoint(str(ckpts["base"])), BenchSpec(base="", self_spec_tokens=4))
    assert unshifted["i"] == unshifted["j"] and "cannot draft for itself" in unshifted["i"]
    assert "shifted read-out" in unshifted["i"]


def test_drafter_system_emits_its_verifiers_tokens(tmp_path):
    """(l): a draft-only drafter of the shipped base (one draft-recipe update) beside its recorded verifier emits
    the verifier's greedy tokens; without --drafter, or with --self-spec-tokens 0, a row that says why; a checkpoint
    that records no verifier is refused by name."""
    from orl.checkpoint import load_checkpoint
    from orl.engine.ar import ARConfig, ARDecoder
    from orl.eval.bench import _drafter
    from orl.presets import get_preset
    from orl.train.draft import DraftConfig, train_draft
    from orl.train.orl import SHIPPED_BASE

    cfg = DraftConfig(**{**get_preset("draft", "smoke").to_dict(), "draft_only": True, "ar_weight": 0.0,
                         "updates": 1})
    train_draft(cfg, tmp_path / "d", log=lambda *_: None)
    l_sys = _drafter(BenchSpec(base="", drafter=str(tmp_path / "d"), self_spec_tokens=3, max_new_tokens=16))
    base, tok, manifest = load_checkpoint(SHIPPED_BASE)
    plain = ARDecoder(base, tok, manifest=manifest)
    from orl.eval.tasks import get_task

    outs = []
    for name in ("split", "prog", "long"):
        prompt = get_task(name).sample("heldout", 0).prompt
        outs.append(l_sys(prompt))
        assert outs[-1].token_ids == plain.generate(prompt, ARConfig(max_new_tokens=16))[0].token_ids
    assert sum(o.forwards for o in outs) < sum(len(o.token_ids) for o in outs)  # drafts were accepted
    assert _drafter(BenchSpec(base="")) == "n/a: no --drafter given"
    # refused before any system is built (BenchSpec.validate), by name
    with pytest.raises(ValueError, match="needs --self-spec-tokens K"):
        BenchSpec(base="", drafter=str(tmp_path / "d")).validate()
    with pytest.raises(ValueError, match="records no verifier"):
        BenchSpec(base="", drafter=SHIPPED_BASE, self_spec_tokens=3).validate()
    with pytest.raises(ValueError, match="records no verifier"):
        _drafter(BenchSpec(base="", drafter=SHIPPED_BASE, self_spec_tokens=3))
    from orl.eval.bench_table import _drafter_head

    assert _drafter_head(BenchSpec(base="", drafter=str(tmp_path / "d"), self_spec_tokens=3)) == \
        f"(l) drafter `{tmp_path / 'd'}` verified by `checkpoints/orl-tiny-base`, 3 groups"
