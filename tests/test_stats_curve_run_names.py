"""Training curves of two runs whose directories share a name (runs/a/stage1 and runs/b/stage1, the layout
records.distinct_model_names exists for): each run must keep its own line. The logs were keyed by the bare
directory name, so the second log replaced the first and the plot silently showed one run."""
import json

from orl.eval.curves import plot_training_curves


def _log(path, reward: float) -> str:
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps({"update": u, "rollout_reward": reward, "pred": 1.0}) + "\n" for u in (1, 2)))
    return str(path)


def test_two_runs_of_one_directory_name_keep_a_line_each(tmp_path):
    a = _log(tmp_path / "runs" / "a" / "stage1" / "train.log.jsonl", 0.25)
    b = _log(tmp_path / "runs" / "b" / "stage1" / "train.log.jsonl", 0.75)
    fig = plot_training_curves([a, b], tmp_path / "curves.png", window=1)
    lines = fig.axes[0].get_lines()  # the rollout reward panel, in %
    assert sorted(line.get_label() for line in lines) == ["a/stage1", "b/stage1"]
    assert sorted(tuple(line.get_ydata()) for line in lines) == [(25.0, 25.0), (75.0, 75.0)]


def test_distinct_names_stay_as_they_are(tmp_path):
    a = _log(tmp_path / "runs" / "a" / "stage1" / "train.log.jsonl", 0.25)
    b = _log(tmp_path / "runs" / "a" / "stage2" / "train.log.jsonl", 0.75)
    fig = plot_training_curves([a, b], tmp_path / "curves.png", window=1)
    assert sorted(line.get_label() for line in fig.axes[0].get_lines()) == ["stage1", "stage2"]
