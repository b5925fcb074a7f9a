"""`orl report`: tables and plots from a small hand-made fixture of records; table values must equal
what the records say."""
from __future__ import annotations

import base64
import csv
import re

import pytest

from orl.eval import metrics
from orl.eval.records import RecordWriter
from orl.eval.report import build_report, eval_summary

PNG = b"\x89PNG\r\n\x1a\n"
# (model, threshold) -> (correct prompts of 4, TPF, tokens/s): m2 is faster and as accurate at 0.9
CURVES = {("m1", 0.9): (4, 1.5, 100.0), ("m1", 0.5): (3, 3.0, 180.0),
          ("m2", 0.9): (4, 2.5, 150.0), ("m2", 0.5): (2, 4.0, 240.0)}
TASKS = {"add": 0, "sort": 1}  # sort gets one correct prompt fewer


def fixture_records() -> list[dict]:
    recs = []
    for (model, tau), (correct, tpf, tps) in CURVES.items():
        decode = {"rule": "threshold", "block_len": 4, "residual": "off", "temperature": 0.0, "threshold": tau}
        for task, fewer in TASKS.items():
            for i in range(4):
                n_tokens = 60  # every sample at the curve's TPF: 60 / tpf forwards, ending with EOS
                recs.append({
                    "prompt_id": f"{task}/heldout/{i}", "task": task, "sample": 0, "verdict": i < correct - fewer,
                    "n_tokens": n_tokens, "finished": True, "tpf": tpf,
                    "forwards": {"prefill": 1, "step": round(n_tokens / tpf), "commit": 0},
                    "block_steps": [1, 2] if tau == 0.5 else [3, 3, i + 1],
                    "timing": {"tokens_per_s": tps + i, "total_s": n_tokens / (tps + i), "prefill_s": 0.001},
                    "batch_size": 1, "decode": decode, "config_id": f"{tau}",
                    "model": {"name": model, "id": model, "path": f"/ckpt/{model}"}})
    return recs


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    with RecordWriter(d / "a.jsonl") as w:
        w.write([r for r in fixture_records() if r["model"]["name"] == "m1"])
    with RecordWriter(d / "b.jsonl") as w:
        w.write([r for r in fixture_records() if r["model"]["name"] == "m2"])
    return build_report([d / "a.jsonl", d / "b.jsonl"], d / "out", train_logs=[train_log(d)]).parent


def train_log(d):
    import json

    log = d / "orl-x.log.jsonl"
    rows = [{"update": u, "rollout_reward": u / 10, "rollout_tpf": 2 + u / 10, "rollout_steps_per_block": 4 - u / 10,
             "pred": 0.5, "aec": 0.01} for u in range(1, 11)]
    log.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"eval_only": 1}\n')
    return log


def read_csv(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_all_outputs_exist_and_pngs_are_images(report):
    for name in ("headline.csv", "summary.csv", "overall.csv", "aup.csv", "report.md", "report.html"):
        assert (report / name).stat().st_size > 0
    for name in ("accuracy_vs_tpf.png", "accuracy_vs_tokens_per_s.png", "tpf_per_task.png", "steps_per_block.png"):
        data = (report / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000, name
        assert f"]({name})" in (report / "report.md").read_text()


def test_summary_table_matches_the_records(report):
    rows = read_csv(report / "summary.csv")
    assert len(rows) == len(CURVES) * len(TASKS)
    for row in rows:
        correct, tpf, tps = CURVES[(row["model"], float(row["tau"]))]
        fewer = TASKS[row["task"]]
        assert row["decoder"] == "threshold L4"
        assert int(row["n"]) == 4
        assert float(row["acc %"]) == 100 * (correct - fewer) / 4  # one unit: percent of samples
        assert float(row["TPF"]) == tpf
        assert float(row["TPF noEOS"]) == pytest.approx(59 / 60 * tpf)  # each sample's EOS left out
        assert float(row["tok/s mean"]) == pytest.approx(tps + 1.5)  # mean of tps + 0..3
        assert row["batch"] == "1"
        steps = [1, 2] * 4 if row["tau"] == "0.5" else [3, 3, 1, 3, 3, 2, 3, 3, 3, 3, 3, 4]
        assert float(row["steps/block"]) == pytest.approx(sum(steps) / len(steps))
    pooled = {(r["model"], float(r["tau"])): r for r in read_csv(report / "overall.csv")}
    assert float(pooled[("m2", 0.5)]["acc %"]) == 100 * (2 + 1) / 8 and int(pooled[("m2", 0.5)]["n"]) == 8


def test_steps_table_counts_every_block(report):
    rows = {(r["model"], float(r["tau"])): r for r in read_csv(report / "steps.csv")}
    assert len(rows) == len(CURVES)
    # tau 0.5: every record has blocks [1, 2]; tau 0.9: [3, 3, i + 1] for i = 0..3 -> steps 1, 2, 3, 4 once
    # each per task, plus two 3s per record
    r = rows[("m1", 0.5)]
    assert (int(r["blocks"]), int(r["1"]), int(r["2"]), int(r["3"])) == (16, 8, 8, 0)
    r = rows[("m2", 0.9)]
    assert (int(r["blocks"]), int(r["1"]), int(r["2"]), int(r["3"]), int(r["4"]), int(r[">=8"])) == (24, 2, 2, 18, 2, 0)
    assert float(r["steps/block"]) == pytest.approx((18 * 3 + 2 * 1 + 2 * 2 + 2 * 4) / 24)
    assert "Denoising steps per block" in (report / "report.md").read_text()


def test_aup_table_matches_metrics(report):
    rows = {(r["model"], r["task"]): r for r in read_csv(report / "aup.csv")}
    # task add: y_max = 1.0 (both models at tau 0.9)
    m1 = metrics.aup([1.5, 3.0], [1.0, 0.75], 1.0)
    assert float(rows[("m1", "add")]["AUP"]) == pytest.approx(m1)
    # by hand: 1.5 * 100 and the second point (75%, 25 points below the first) is dropped
    assert m1 == pytest.approx(150.0)
    assert float(rows[("m2", "add")]["AUP"]) == pytest.approx(250.0)
    # sort: first points 75%, y_max 75%; m1's 50% point is dropped too
    assert float(rows[("m1", "sort")]["AUP"]) == pytest.approx(1.5 * 75)
    assert {r["task"] for r in rows.values()} == {"add", "sort", "all"}


def test_html_is_self_contained_and_holds_the_tables(report):
    page = (report / "report.html").read_text()
    srcs = re.findall(r"src='([^']*)'", page)
    assert len(srcs) == 5 and all(s.startswith("data:image/png;base64,") for s in srcs)  # + training curves
    assert all(base64.b64decode(s.split(",", 1)[1]).startswith(PNG) for s in srcs)
    assert "http" not in page.replace("http-equiv", "")  # nothing fetched from elsewhere
    assert page.count("<table>") == 5 and "threshold L4" in page  # headline (m2 vs m1) + 4 tables
    assert page.index("Headline") < page.index("Per task and threshold")


def test_eval_summary_lists_each_task_and_threshold_and_a_pooled_row():
    text = eval_summary(fixture_records())
    lines = text.splitlines()
    table = lines[: 1 + len(CURVES) * (len(TASKS) + 1)]
    assert table[0].split()[:7] == ["model", "decoder", "task", "tau", "n", "acc", "%"]
    assert table[0].rstrip().endswith("tok/s mean  batch")  # tokens/s stands next to its batch size
    # m1 at 0.5: add 3 of 4, sort 2 of 4; then the pooled row: 5 of 8, TPF 480 / 160 = 3.00
    m1 = [ln.split() for ln in table if ln.split()[:1] == ["m1"] and ln.split()[4] == "0.5"]
    assert [r[3] for r in m1] == ["add", "sort", "all"]
    assert [r[6] for r in m1] == ["75.0", "50.0", "62.5"] and m1[2][5] == "8" and m1[2][7] == "3.00"
    assert "ratio of sums" in text and "batch size" in text
    assert "TPF < 1" not in text  # no row below 1 here
    low = [{**r, "forwards": {"prefill": 1, "step": 70, "commit": 5}} for r in fixture_records()]
    assert "TPF < 1" in eval_summary(low) and "commit forward" in eval_summary(low)


def test_training_curves_from_trainer_logs(report, tmp_path):
    from orl.eval import curves

    log = train_log(tmp_path)
    assert [r["update"] for r in curves.read_log(log)] == list(range(1, 11))
    assert curves.smooth([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    png = (report / "training_curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "training_curves.png" in (report / "report.md").read_text()
    empty = tmp_path / "empty.log.jsonl"
    empty.write_text('{"step": 1}\n')
    with pytest.raises(ValueError, match="no per-update records"):
        curves.read_log(empty)


def _hrec(model: str, task: str, seed: int, i: int, verdict: bool, tokens: int, fwd: int, tau=0.9) -> dict:
    rule = "ar" if tau is None else "threshold"
    return {"prompt_id": f"{task}/heldout/{seed * 2 ** 32 + i}", "task": task, "sample": 0, "verdict": verdict,
            "n_tokens": tokens, "finished": True, "forwards": {"prefill": 1, "step": fwd, "commit": 0},
            "decode": {"rule": rule, "block_len": 4, "residual": "off", "temperature": 0.0, "threshold": tau,
                       "seed": seed},
            "model": {"name": model, "id": model}}


def headline_records() -> list[dict]:
    """Family x: 3 seeds x 5 prompts = 15 pairs k = 0..14; A right for k >= 2, B right for k < 2 or
    k >= 12 -> b = 10 (k = 2..11), c = 2, both right 3. A: 10 tokens in 5 / 4 / 2 forwards at seed
    0 / 1 / 2 (TPF 2, 2.5, 5; pooled 150 / 55); B: 12 tokens in 3 forwards everywhere (TPF 4).
    Family y: seed 0 only, 2 prompts both right. One B-only record (seed 3) stays unpaired."""
    recs = []
    for k in range(15):
        seed, i = divmod(k, 5)
        recs.append(_hrec("A", "x", seed, i, k >= 2, 10, (5, 4, 2)[seed]))
        recs.append(_hrec("B", "x", seed, i, k < 2 or k >= 12, 12, 3))
    for i in range(2):
        recs += [_hrec("A", "y", 0, i, True, 4, 2), _hrec("B", "y", 0, i, True, 4, 1)]
    recs.append(_hrec("B", "x", 3, 0, True, 12, 3))
    recs += [_hrec("A", "x", 0, 0, False, 10, 5, tau=0.5)]  # another threshold: not the headline's
    return recs


def test_headline_mcnemar_and_seed_spread_by_hand():
    from orl.eval.headline import compare, headline_text

    (blk,) = compare(headline_records())
    assert blk["a"] == ("A", "threshold L4") and blk["thresholds"] == (0.9, 0.9)
    assert blk["seeds"] == [0, 1, 2] and blk["unpaired"] == 1
    x, y, pooled = blk["rows"]
    assert (x["task"], x["n"], x["only_a"], x["only_b"]) == ("x", 15, 10, 2)
    assert x["p"] == pytest.approx(79 / 2048)  # 2 * (1 + 12 + 66) / 2^12 = 0.0386
    assert x["a"]["accuracy"] == pytest.approx(13 / 15) and x["b"]["accuracy"] == pytest.approx(5 / 15)
    assert x["diff"] == pytest.approx(-8 / 15)
    assert x["a"]["tpf"] == pytest.approx(150 / 55) and x["a"]["spread"] == (2.0, 2.5, 5.0)
    assert x["a"]["tpf_no_eos"] == pytest.approx(135 / 55)
    assert x["b"]["tpf"] == 4.0 and x["b"]["spread"] == (4.0, 4.0, 4.0)
    assert (y["n"], y["only_a"], y["only_b"], y["p"]) == (2, 0, 0, 1.0)
    assert (pooled["task"], pooled["n"], pooled["only_a"], pooled["only_b"]) == ("all", 17, 10, 2)
    assert pooled["a"]["tpf"] == pytest.approx(158 / 59)  # 150 + 8 tokens over 55 + 4 forwards
    text = headline_text([blk])
    assert "0.0386" in text and "-53.3" in text and "2.73 (2.00/2.50/5.00)" in text and "x1.47" in text
    assert "WARNING" not in text and "1 samples evaluated by only one" in text
    (b2,) = compare(headline_records(), baseline="B")  # the other way round
    assert b2["a"][0] == "B" and b2["rows"][0]["only_a"] == 2 and b2["rows"][0]["diff"] == pytest.approx(8 / 15)
    with pytest.raises(ValueError, match="not a model of these records"):
        compare(headline_records(), baseline="C")


def test_headline_pairs_an_ar_peer_and_warns_on_few_seeds():
    from orl.eval.headline import compare, headline_text

    recs = [r for r in headline_records() if r["task"] == "y"] + \
        [_hrec("ar", "y", 0, i, i == 0, 4, 4, tau=None) for i in range(2)]
    blocks = compare(recs, baseline="A")
    ar = next(b for b in blocks if b["b"][0] == "ar")
    assert ar["thresholds"] == (0.9, None) and ar["rows"][0]["only_a"] == 1
    text = headline_text(blocks)
    assert "WARNING: 1 prompt seed(s)" in text and "ar / AR at tau -" in text
    assert "TPF < 1" not in text  # AR: 4 tokens / 4 forwards = 1
    assert "nothing to compare" in headline_text(compare([r for r in recs if r["model"]["name"] == "A"]))


def test_plots_stay_readable_with_many_runs(tmp_path):
    """7 runs x 2 thresholds: every panel has its own legend naming every run, no text labels sit next
    to points, and no legend covers another panel."""
    from orl.eval.plots import plot_accuracy, plot_steps_hist, plot_tpf_per_task

    recs = []
    for m in range(7):
        for r in fixture_records():
            if r["model"]["name"] == "m1":
                recs.append({**r, "model": {"name": f"run-{m}", "id": f"run-{m}"}})
    rows = summarize_for_plots(recs)
    figs = [plot_accuracy(rows, "tpf", "TPF", tmp_path / "a.png"), plot_tpf_per_task(rows, tmp_path / "t.png"),
            plot_steps_hist(recs, tmp_path / "s.png")]
    for fig in figs:
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            legend = ax.get_legend()
            assert legend is not None, ax.get_title()
            names = [t.get_text() for t in legend.get_texts()]
            assert all(f"run-{m} / threshold L4" in names for m in range(7)), names
            assert not ax.texts  # thresholds are marker shapes, not annotations
            box = legend.get_window_extent(renderer)
            for other in fig.axes:
                assert not box.overlaps(other.get_window_extent(renderer)), (ax.get_title(), other.get_title())
    assert (tmp_path / "a.png").read_bytes()[:8] == PNG


def summarize_for_plots(recs: list[dict]) -> list[dict]:
    from orl.eval.report import POOLED, summarize

    return summarize(recs, ("model", "decoder", "task", "threshold")) + \
        [{**r, "task": POOLED} for r in summarize(recs, ("model", "decoder", "threshold"))]


def test_records_of_two_splits_need_a_split(tmp_path):
    """orl eval writes in-range (heldout) and beyond-the-range records to one file (issue 21): the report
    refuses to pool them unasked, and --split keeps one split's records, whose numbers then match."""
    import subprocess
    import sys

    inside = [{**r, "split": "heldout"} for r in fixture_records()]
    beyond = [{**r, "split": "beyond", "prompt_id": r["prompt_id"].replace("heldout", "beyond"), "verdict": False}
              for r in fixture_records()]
    with RecordWriter(tmp_path / "r.jsonl") as w:
        w.write(inside + beyond)
    with pytest.raises(ValueError, match="splits beyond, heldout: pass --split"):
        build_report([tmp_path / "r.jsonl"], tmp_path / "none")
    assert not (tmp_path / "none").exists()  # refused before anything is written
    with pytest.raises(ValueError, match="--split held: no records of that split"):
        build_report([tmp_path / "r.jsonl"], tmp_path / "none", split="held")
    rows = read_csv(build_report([tmp_path / "r.jsonl"], tmp_path / "in", split="heldout").parent / "summary.csv")
    assert {float(r["acc %"]) for r in rows if r["model"] == "m2" and r["task"] == "add"} == {100.0, 50.0}
    assert all(int(r["n"]) == 4 for r in rows)
    pooled = read_csv(build_report([tmp_path / "r.jsonl"], tmp_path / "all", split="all").parent / "summary.csv")
    assert all(int(r["n"]) == 8 for r in pooled)  # heldout and beyond together, when asked
    p = subprocess.run([sys.executable, "-m", "orl.cli", "report", str(tmp_path / "r.jsonl"), "--out",
                        str(tmp_path / "cli"), "--split", "beyond"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = read_csv(tmp_path / "cli" / "summary.csv")
    assert rows and all(float(r["acc %"]) == 0 for r in rows)
    assert "r.jsonl (split beyond)" in (tmp_path / "cli" / "report.md").read_text()
    with RecordWriter(tmp_path / "old.jsonl") as w:  # hand-made records without the field: the prompt id's
        w.write([{k: v for k, v in r.items() if k != "split"} for r in inside + beyond])
    rows = read_csv(build_report([tmp_path / "old.jsonl"], tmp_path / "old", split="beyond").parent / "summary.csv")
    assert rows and all(float(r["acc %"]) == 0 and int(r["n"]) == 4 for r in rows)


def test_configs_the_label_does_not_show_get_rows_of_their_own(tmp_path):
    """Before: three greedy runs of one model at 0.9 with other --max-new-tokens / --confidence pooled into one row
    (n = 3x the prompts) and read as three samples (a fake pass@3); each now has its settings in its label."""
    base = [r for r in fixture_records() if r["model"]["name"] == "m1" and r["decode"]["threshold"] == 0.9]
    cut = [{**r, "config_id": "cut", "decode": {**r["decode"], "max_new_tokens": 20}, "verdict": False} for r in base]
    base = [{**r, "decode": {**r["decode"], "max_new_tokens": 64}} for r in base]
    with RecordWriter(tmp_path / "r.jsonl") as w:
        w.write(base + cut)
    rows = read_csv(build_report([tmp_path / "r.jsonl"], tmp_path / "rep").parent / "summary.csv")
    by = {(r["decoder"], r["task"]): r for r in rows}
    assert {d for d, _ in by} == {"threshold L4 [max_new_tokens=64]", "threshold L4 [max_new_tokens=20]"}
    assert all(int(r["n"]) == 4 for r in rows)
    assert float(by["threshold L4 [max_new_tokens=20]", "add"]["acc %"]) == 0
    assert float(by["threshold L4 [max_new_tokens=64]", "add"]["acc %"]) == 100
