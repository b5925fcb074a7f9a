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
    return build_report([d / "a.jsonl", d / "b.jsonl"], d / "out").parent


def read_csv(path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_all_outputs_exist_and_pngs_are_images(report):
    for name in ("summary.csv", "overall.csv", "aup.csv", "report.md", "report.html"):
        assert (report / name).stat().st_size > 0
    for name in ("accuracy_vs_tpf.png", "accuracy_vs_tokens_per_s.png", "tpf_per_task.png", "steps_per_block.png"):
        data = (report / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000, name
        assert f"]({name})" in (report / "report.md").read_text()


def test_summary_table_matches_the_records(report):
    rows = read_csv(report / "summary.csv")
    assert len(rows) == len(CURVES) * len(TASKS)
    for row in rows:
        correct, tpf, tps = CURVES[(row["model"], float(row["threshold"]))]
        fewer = TASKS[row["task"]]
        assert row["decoder"] == "threshold L4"
        assert int(row["n"]) == 4
        assert float(row["accuracy"]) == (correct - fewer) / 4
        assert float(row["tpf"]) == tpf
        assert float(row["tokens_per_s"]) == pytest.approx(tps + 1.5)  # mean of tps + 0..3
        steps = [1, 2] * 4 if row["threshold"] == "0.5" else [3, 3, 1, 3, 3, 2, 3, 3, 3, 3, 3, 4]
        assert float(row["steps_per_block"]) == pytest.approx(sum(steps) / len(steps))
    pooled = {(r["model"], float(r["threshold"])): r for r in read_csv(report / "overall.csv")}
    assert float(pooled[("m2", 0.5)]["accuracy"]) == (2 + 1) / 8 and int(pooled[("m2", 0.5)]["n"]) == 8


def test_steps_table_counts_every_block(report):
    rows = {(r["model"], float(r["threshold"])): r for r in read_csv(report / "steps.csv")}
    assert len(rows) == len(CURVES)
    # tau 0.5: every record has blocks [1, 2]; tau 0.9: [3, 3, i + 1] for i = 0..3 -> steps 1, 2, 3, 4 once
    # each per task, plus two 3s per record
    r = rows[("m1", 0.5)]
    assert (int(r["blocks"]), int(r["1"]), int(r["2"]), int(r["3"])) == (16, 8, 8, 0)
    r = rows[("m2", 0.9)]
    assert (int(r["blocks"]), int(r["1"]), int(r["2"]), int(r["3"]), int(r["4"]), int(r[">=8"])) == (24, 2, 2, 18, 2, 0)
    assert float(r["mean_steps"]) == pytest.approx((18 * 3 + 2 * 1 + 2 * 2 + 2 * 4) / 24)
    assert "Denoising steps per block" in (report / "report.md").read_text()


def test_aup_table_matches_metrics(report):
    rows = {(r["model"], r["task"]): r for r in read_csv(report / "aup.csv")}
    # task add: y_max = 1.0 (both models at tau 0.9)
    m1 = metrics.aup([1.5, 3.0], [1.0, 0.75], 1.0)
    assert float(rows[("m1", "add")]["aup"]) == pytest.approx(m1)
    # by hand: 1.5 * 100 and the second point (75%, 25 points below the first) is dropped
    assert m1 == pytest.approx(150.0)
    assert float(rows[("m2", "add")]["aup"]) == pytest.approx(250.0)
    # sort: first points 75%, y_max 75%; m1's 50% point is dropped too
    assert float(rows[("m1", "sort")]["aup"]) == pytest.approx(1.5 * 75)
    assert {r["task"] for r in rows.values()} == {"add", "sort", "all"}


def test_html_is_self_contained_and_holds_the_tables(report):
    page = (report / "report.html").read_text()
    srcs = re.findall(r"src='([^']*)'", page)
    assert len(srcs) == 4 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert all(base64.b64decode(s.split(",", 1)[1]).startswith(PNG) for s in srcs)
    assert "http" not in page.replace("http-equiv", "")  # nothing fetched from elsewhere
    assert page.count("<table>") == 4 and "threshold L4" in page


def test_eval_summary_lists_each_task_and_threshold():
    lines = eval_summary(fixture_records()).splitlines()
    assert len(lines) == 1 + len(CURVES) * len(TASKS)
    assert lines[0].split()[:6] == ["model", "decoder", "task", "threshold", "n", "accuracy"]


def test_training_curves_from_trainer_logs(tmp_path):
    import json

    from orl.eval import curves

    log = tmp_path / "orl-x.log.jsonl"
    rows = [{"update": u, "rollout_reward": u / 10, "rollout_tpf": 2 + u / 10, "rollout_steps_per_block": 4 - u / 10,
             "pred": 0.5, "aec": 0.01} for u in range(1, 11)]
    log.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"eval_only": 1}\n')
    assert [r["update"] for r in curves.read_log(log)] == list(range(1, 11))
    assert curves.smooth([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    recs = tmp_path / "r.jsonl"
    with RecordWriter(recs) as w:
        w.write(fixture_records())
    build_report([recs], tmp_path / "rep", train_logs=[log])
    png = (tmp_path / "rep" / "training_curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert "training_curves.png" in (tmp_path / "rep" / "report.md").read_text()
    empty = tmp_path / "empty.log.jsonl"
    empty.write_text('{"step": 1}\n')
    with pytest.raises(ValueError, match="no per-update records"):
        curves.read_log(empty)
