"""Tasks of the user's own (issue 23 items 1, 2): Python modules and JSONL files registered from the CLI,
the four checkers (python_tests in the sandbox, with partial credit), rewards in [0, 1] and the
keep_reward threshold of ORL, `orl eval` / `orl train --recipe orl` on them, and `orl tasks`."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap

import pytest
import torch

from orl.checkpoint import save_checkpoint
from orl.cli import main
from orl.eval.records import read_records
from orl.eval.tasks import TASKS, get_task
from orl.eval.tasks.base import Task, split_of
from orl.eval.tasks.custom import load_tasks, reward_of
from orl.eval.tasks.datafile import load_data_task
from orl.model import ModelArgs, Transformer
from orl.tokenizer import CharTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

# A task defined outside the package: echo a word; exact answers pass, and partial credit for an
# answer of the right length (so that a random base earns some reward).
ECHO = '''
from orl.eval.tasks import Task

class Echo(Task):
    name = "echo_{tag}"
    description = "say:<word>= ; answer is the word"

    def generate(self, rng):
        word = "".join(rng.choice("abc") for _ in range(rng.randint(1, 3)))
        return f"say:{{word}}=", word

    def check(self, prompt, output):
        return output == prompt[4:-1]

    def reward(self, prompt, output):
        word = prompt[4:-1]
        length = 1 - abs(len(output) - len(word)) / max(len(output), len(word))
        return 0.5 * length + 0.5 * self.verify(prompt, output)
'''


def write(path, text: str):
    path.write_text(textwrap.dedent(text))
    return path


def jsonl(path, rows: list[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(autouse=True)
def registry():
    """Each test registers into the process-wide registry; leave it as it was."""
    before = dict(TASKS)
    yield
    TASKS.clear()
    TASKS.update(before)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny random base whose read-out favours EOS (a constant component in every position row,
    matched by the EOS row of the tied embedding), so that rollouts end within the budget with short
    answers of mixed lengths; its manifest records the tasks it was trained on."""
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=128, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
                                  ffn_dim=64, max_seq_len=160, learned_pos=True, shift_logits=True))
    with torch.no_grad():
        model.model.embed_positions.weight[:, 0] = 8.0
        model.lm_head.weight[CharTokenizer().eos_id].zero_()
        model.lm_head.weight[CharTokenizer().eos_id, 0] = 0.3
    return save_checkpoint(model, CharTokenizer(), tmp_path_factory.mktemp("base") / "base", {
        "block_len": 8, "recipe": {"name": "pretrain", "config": {"tasks": ["split"]}}})


# --- Python modules ---------------------------------------------------------------------------------

def test_a_module_outside_the_package_registers_its_tasks(tmp_path):
    mod = write(tmp_path / "my_tasks.py", ECHO.format(tag="a"))
    assert load_tasks([str(mod)]) == ["echo_a"]
    task = get_task("echo_a")
    s = task.sample("heldout", 3)
    assert s.split == "heldout" == split_of("echo_a", s.prompt) and task.verify(s.prompt, s.answer + " ")
    assert reward_of(task, "say:abc=", "abc") == 1.0 and reward_of(task, "say:abc=", "ab") == pytest.approx(1 / 3)
    # knobs: a module lists configured instances in TASKS
    knobs = write(tmp_path / "knobs.py", """
        from orl.eval.tasks import Long
        class Digits(Long):
            name = "digits_b"
        TASKS = [Digits(n_digits=4)]
    """)
    assert load_tasks([str(knobs)]) == ["digits_b"] and len(get_task("digits_b").sample("train", 0).prompt) == 12


@pytest.mark.parametrize("source, message", [
    ("from orl.eval.tasks import Split\nclass Mine(Split):\n    name = 'split'\n",
     "task name 'split' is taken by the built-in task 'split'"),
    ("x = 1\n", "defines no Task subclass"),
    ("import not_a_module_anywhere\n", "importing it failed: ModuleNotFoundError"),
    ("from orl.eval.tasks import Task\nclass K(Task):\n    name = 'k'\n    def __init__(self, n):\n        pass\n",
     "cannot build K()"),
    ("from orl.eval.tasks import Task\nclass K(Task):\n    name = 'a,b'\n", "must be letters, digits"),
])
def test_bad_modules_are_refused_by_name(tmp_path, source, message):
    mod = write(tmp_path / "bad.py", source)
    before = dict(TASKS)
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        load_tasks([str(mod)])
    assert "bad.py" in str(e.value) and TASKS == before  # nothing registered, the built-in untouched


def test_two_sources_of_one_name_are_refused(tmp_path):
    a = write(tmp_path / "a.py", ECHO.format(tag="c"))
    b = write(tmp_path / "b.py", ECHO.format(tag="c"))
    with pytest.raises(ValueError, match=r"'echo_c' is defined by both --task-module .*a\.py and --task-module .*b\.py"):
        load_tasks([str(a), str(b)])
    assert "echo_c" not in TASKS
    with pytest.raises(ValueError, match="no such file"):
        load_tasks([str(tmp_path / "missing.py")])


class Bad(Task):
    name = "bad"

    def __init__(self, value):
        self.value = value

    def reward(self, prompt, output):
        return self.value


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan"), "high", None])
def test_rewards_outside_0_1_are_refused_naming_the_task(value):
    with pytest.raises(ValueError, match="task 'bad': reward"):
        reward_of(Bad(value), "p", "o")
    assert reward_of(Bad(True), "p", "o") == 1.0 and reward_of(Bad(0.25), "p", "o") == 0.25


# --- JSONL data files -------------------------------------------------------------------------------

def test_exact_numeric_and_regex_checkers(tmp_path):
    task = load_data_task(str(jsonl(tmp_path / "qa.jsonl", [
        {"prompt": "7*6=", "answer": "42"},
        {"prompt": "a colour:", "answers": ["red", "blue"], "checker": "exact"},
        {"prompt": "half of 5:", "answer": "2.5", "checker": "numeric", "tolerance": 0.01},
        {"prompt": "pi:", "answers": ["3.14159"], "checker": "numeric"},
        {"prompt": "a word:", "pattern": "[a-z]+", "checker": "regex", "split": "heldout"},
    ])))
    assert task.name == "qa"
    cases = [("7*6=", "42", True), ("7*6=", "42\n", True), ("7*6=", " 42", False), ("7*6=", "042", False),
             ("a colour:", "blue", True), ("a colour:", "Blue", False),
             ("half of 5:", "2.5", True), ("half of 5:", "2.509", True), ("half of 5:", "2.52", False),
             ("half of 5:", "25e-1", True), ("half of 5:", "nan", False), ("half of 5:", "2,5", False),
             ("pi:", "3.14159", True), ("pi:", "3.1416", False),
             ("a word:", "abc", True), ("a word:", "abc1", False), ("a word:", "", False)]
    for prompt, output, ok in cases:
        assert task.verify(prompt, output) is ok, (prompt, output)
        assert reward_of(task, prompt, output) == float(ok)
    with pytest.raises(ValueError, match="not a prompt of task 'qa'"):
        task.verify("8*6=", "48")


def test_splits_follow_the_hash_rule_unless_a_row_names_one(tmp_path):
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(60)]
    rows[0]["split"] = "heldout"
    rows[1]["split"] = "train"
    task = load_data_task(f"sums={jsonl(tmp_path / 'data.v2.jsonl', rows)}")
    assert task.name == "sums"
    want = {r["prompt"]: r.get("split") or split_of("sums", r["prompt"]) for r in rows}
    assert {r.prompt: r.split for r in task.rows} == want
    assert 0 < task.count("heldout") < 20 and task.count("train") + task.count("heldout") == 60
    held = [task.sample("heldout", i) for i in range(task.count("heldout") + 1)]
    assert held[0].prompt == "0+0=" and held[-1].prompt == held[0].prompt  # rows cycle
    assert all(want[s.prompt] == "heldout" for s in held)
    only_train = load_data_task(str(jsonl(tmp_path / "t.jsonl", [{"prompt": "1+1=", "answer": "2", "split": "train"}])))
    with pytest.raises(ValueError, match=r"has no 'heldout' rows.*\"split\": \"heldout\""):
        only_train.sample("heldout", 0)
    with pytest.raises(ValueError, match="'beyond' exists only for length-varied"):
        only_train.sample("beyond", 0)


@pytest.mark.parametrize("row, message", [
    ({"prompt": "x", "anwser": "1"}, "unknown field(s) ['anwser']"),
    ({"prompt": "x"}, "the exact checker needs \"answer\""),
    ({"prompt": "", "answer": "1"}, "\"prompt\" must be a non-empty string"),
    ({"prompt": "x", "answer": "1", "checker": "fuzzy"}, "unknown checker 'fuzzy'"),
    ({"prompt": "x", "answer": "one", "checker": "numeric"}, "numeric answers must be decimal numbers"),
    ({"prompt": "x", "checker": "regex", "pattern": "("}, "not a valid regular expression"),
    ({"prompt": "x", "checker": "python_tests", "tests": []}, "needs \"tests\""),
    ({"prompt": "x", "answer": "1", "split": "test"}, "\"split\" must be one of"),
    ({"prompt": "x", "answer": "1", "tests": ["assert 1"]}, "do not apply to the exact checker"),
    ({"prompt": "x", "answer": "1", "stop": ["", "\n"]}, "\"stop\": stop strings must not be empty"),
    ({"prompt": "x", "answer": "1", "stop": 5}, "\"stop\": stop must be a string or a list of strings"),
    ([1, 2], "expected a JSON object"),
])
def test_bad_rows_are_refused_naming_the_line(tmp_path, row, message):
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"prompt": "fine", "answer": "1"}) + "\n\n" + json.dumps(row) + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{f}:3: ") + ".*" + re.escape(message)):
        load_data_task(str(f))


def test_a_data_task_decodes_with_its_stop_strings(base, tmp_path):
    """"stop" in the rows is the task's stop: an eval of it stops there (recorded in its decode settings);
    rows that disagree are refused naming the file."""
    rows = [{"prompt": f"line {i}:", "answer": "x", "stop": "\n", "split": "heldout"} for i in range(3)]
    task = load_data_task(str(jsonl(tmp_path / "lines.jsonl", rows)))
    assert task.stop == ("\n",)
    out = tmp_path / "records.jsonl"
    assert main(["eval", "--model", str(base), "--tasks-file", str(tmp_path / "lines.jsonl"), "--out", str(out),
                 "--block-len", "8", "--max-new-tokens", "16", "--no-progress"]) == 0
    assert [r["decode"]["stop"] for r in read_records(out)] == [["\n"]] * 3
    mixed = jsonl(tmp_path / "mixed_stops.jsonl", [rows[0], {**rows[1], "stop": ["\n", "."]}])
    with pytest.raises(ValueError, match=r"mixed_stops\.jsonl: rows give different \"stop\" values"):
        load_data_task(str(mixed))


def test_a_repeated_prompt_and_a_broken_line_are_refused(tmp_path):
    f = jsonl(tmp_path / "dup.jsonl", [{"prompt": "p", "answer": "1"}, {"prompt": "p", "answer": "2"}])
    with pytest.raises(ValueError, match=r"dup\.jsonl:2: repeats the prompt of line 1"):
        load_data_task(str(f))
    f.write_text('{"prompt": "p", "answer": "1"}\n{"prompt": \n')
    with pytest.raises(ValueError, match=r"dup\.jsonl:2: not JSON"):
        load_data_task(str(f))


def test_python_tests_run_in_the_sandbox_with_partial_credit(tmp_path):
    task = load_data_task(str(jsonl(tmp_path / "code.jsonl", [
        {"prompt": "def inc(x):\n", "answer": "    return x + 1", "checker": "python_tests",
         "tests": ["assert inc(1) == 2", "assert inc(-1) == 0", "assert inc(5) == 6"]},
        {"prompt": "Write f, returning 3.", "checker": "python_tests", "include_prompt": False,
         "tests": ["assert f() == 3"], "timeout_s": 1},
    ])))
    p = "def inc(x):\n"
    assert task.verify(p, "    return x + 1") and reward_of(task, p, "    return x + 1") == 1.0
    partial = "    return x + 1 if x > 0 else 7"     # passes 2 of 3 tests
    assert not task.verify(p, partial) and reward_of(task, p, partial) == pytest.approx(2 / 3)
    assert reward_of(task, p, "    return (") == 0.0  # a syntax error fails every test
    q = "Write f, returning 3."
    assert task.verify(q, "def f():\n    return 3") and not task.verify(q, "def f():\n    return 4")
    assert reward_of(task, q, "def f():\n    while True:\n        pass\n    return 3") == 0.0  # timed out


# --- ORL and eval from the CLI ----------------------------------------------------------------------

def orl_args(base, out, module, *sets):
    return ["train", "--recipe", "orl", "--preset", "smoke", "--base", str(base), "--out", str(out),
            "--task-module", str(module), "--set", "updates=3", "--set", "threads=1", "--set", "prompts_per_update=4",
            "--set", "group_size=4", "--set", "eval_every=3", "--set", "eval_samples=2", "--set", "save_every=3",
            *[x for s in sets for x in ("--set", s)]]


def train_log(out) -> list[dict]:
    """The run's JSONL log, beside --out or inside it."""
    path, = [p for p in (out.with_name(out.name + ".log.jsonl"), *out.glob("*.log.jsonl")) if p.is_file()]
    return [json.loads(line) for line in open(path)]


def test_orl_trains_on_a_task_module_from_the_cli_with_a_reward_threshold(base, tmp_path, capsys):
    (tmp_path / "elsewhere").mkdir()
    module = write(tmp_path / "elsewhere" / "my_tasks.py", ECHO.format(tag="orl"))
    assert main(orl_args(base, tmp_path / "run", module, "keep_reward=0.25")) == 0
    assert "note: training on echo_orl" in capsys.readouterr().err
    log = train_log(tmp_path / "run")
    assert [r["update"] for r in log] == [1, 2, 3]
    assert all(0 < r["rollout_reward"] < 1 and 0 <= r["rollout_verified"] <= 1 for r in log)
    trained = [r for r in log if r.get("kept")]
    assert trained and all(r["loss"] > 0 for r in trained)  # partial credit >= 0.25 supervised updates
    assert "echo_orl" in log[-1]["eval"]  # the periodic held-out eval ran on the custom task
    manifest = json.loads((tmp_path / "run" / "orl.json").read_text())
    assert manifest["recipe"]["config"]["tasks"] == ["echo_orl"] and manifest["recipe"]["config"]["keep_reward"] == 0.25
    # the default threshold (1.0) keeps only exact answers, which a random base does not write
    assert main(orl_args(base, tmp_path / "strict", module, "updates=2")) == 0
    strict = train_log(tmp_path / "strict")
    assert all(r["rollout_verified"] == 0 and "loss" not in r for r in strict)
    assert strict[0]["rollout_reward"] == log[0]["rollout_reward"]  # the same first rollouts, judged alike


def python_exits_0(source: str) -> bool:
    """An independent judge for the python_tests rows: plain CPython, no sandbox."""
    return subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=30).returncode == 0


def near(text: str, value: float, tol: float) -> bool:
    try:
        x = float(text)
    except ValueError:
        return False
    return text == text.strip() and math.isfinite(x) and abs(x - value) <= tol


def test_eval_on_a_jsonl_task_with_each_checker(base, tmp_path):
    rows = []
    for i in range(3):
        rows += [{"prompt": f"say nothing {i}:", "answer": "", "split": "heldout"},
                 {"prompt": f"a number {i}:", "answer": str(i), "checker": "numeric", "tolerance": 0.5, "split": "heldout"},
                 {"prompt": f"no digits {i}:", "pattern": "[^0-9]*", "checker": "regex", "split": "heldout"},
                 {"prompt": f"python {i}:", "checker": "python_tests", "tests": ["assert True"], "include_prompt": False,
                  "split": "heldout", "timeout_s": 5}]
    rows.append({"prompt": "a training row:", "answer": "x", "split": "train"})
    data = jsonl(tmp_path / "mixed.jsonl", rows)
    out = tmp_path / "records.jsonl"
    assert main(["eval", "--model", str(base), "--tasks-file", str(data), "--out", str(out), "--limit", "50",
                 "--block-len", "8", "--max-new-tokens", "16", "--batch-size", "6", "--no-progress"]) == 0
    recs = read_records(out)
    by_prompt = {r["prompt"]: r for r in recs}
    assert len(recs) == 12 and set(by_prompt) == {r["prompt"] for r in rows if r["split"] == "heldout"}
    for row in rows[:-1]:
        rec, out_text = by_prompt[row["prompt"]], by_prompt[row["prompt"]]["output_text"].rstrip()
        want = {"exact": lambda: out_text == row.get("answer"),
                "numeric": lambda: near(out_text, float(row["answer"]), 0.5),
                "regex": lambda: re.fullmatch(r"[^0-9]*", out_text) is not None,
                "python_tests": lambda: python_exits_0(out_text + "\n\nassert True\n")}[row.get("checker", "exact")]()
        assert rec["verdict"] == want and rec["task"] == "mixed", (row, out_text)
    assert {r["verdict"] for r in recs} == {True, False}


# --- orl tasks --------------------------------------------------------------------------------------

def test_orl_tasks_lists_families_with_examples_and_what_models_were_trained_on(tmp_path, capsys):
    model = tmp_path / "m"
    model.mkdir()
    (model / "orl.json").write_text(json.dumps({
        "block_len": 16, "objective": "block_diffusion", "model_args": {"max_seq_len": 192},
        "recipe": {"name": "pretrain", "config": {"tasks": ["split", "long7", "gone"], "mix": [3, 5, 1]}}}))
    data = jsonl(tmp_path / "qa.jsonl", [{"prompt": "7*6=", "answer": "42", "split": "heldout"}])
    assert main(["tasks", "split", "long7", "qa", "--model", str(model), "--tasks-file", str(data),
                 "--samples", "50"]) == 0
    out = capsys.readouterr().out
    for name in ("split", "long7"):
        block = out[out.index(f"\n{name} "):]
        prompt = re.search(r"try:     orl generate --model \S+(?: --max-new-tokens \d+)? (.+)\n", block)[1]
        answer = re.search(r"answer:  (\S*)", block)[1]
        prompt = prompt.strip("'")
        assert get_task(name).verify(prompt, answer), (name, prompt, answer)  # the example is a real pair
    assert "4-20 digits in train/heldout, 21-28 in the beyond split" in out
    assert "beyond split: answers" in out and "--max-new-tokens 96" in out  # long7's 28 digits need 6 blocks
    assert "from:    --tasks-file" in out and "1 rows: 0 train, 1 heldout" in out and "orl generate --model DIR" in out
    assert f"{model}: block_diffusion, recipe pretrain, context 192 tokens, block 16" in out
    assert re.search(r"split +mix 3 +prompts +7 chars, answers +7 chars; min_digits=2 max_digits=3 pad=True", out)
    assert re.search(r"long7 +mix 5 .*; 4-20 digits", out)
    assert "gone      mix 1   (not registered here" in out


def test_orl_tasks_describes_the_shipped_models(capsys):
    assert main(["tasks", "--samples", "20"]) == 0
    out = capsys.readouterr().out
    for name in ("split", "keysort", "prog", "constr", "long", "add", "long7"):
        assert f"\n{name} " in out
    assert "orl-tiny-base: block_diffusion, recipe pretrain, context 160 tokens, block 16" in out
    assert re.search(r"try:     orl generate --model \S*checkpoints/orl-tiny-base '\?\+\?=[0-9]+'\n", out)
    assert re.search(r"orl-tiny-orl: .*from checkpoints/orl-tiny-base, rollouts of up to 64 new tokens", out)


def test_generate_points_a_task_model_at_orl_tasks(base, capsys):
    assert main(["generate", "--model", str(base), "--block-len", "8", "--max-new-tokens", "8", "--device", "cpu",
                 "hello"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "" and "`orl tasks` shows their formats" in err  # greedy: EOS first


def test_train_uses_the_custom_tasks_unless_the_config_names_tasks(tmp_path, capsys):
    data = jsonl(tmp_path / "qa.jsonl", [{"prompt": "7*6=", "answer": "42"}])
    assert main(["train", "--recipe", "pretrain", "--preset", "smoke", "--tasks-file", str(data), "--show-config"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\ntasks +tuple +\('qa',\)", out) and re.search(r"\nmix +tuple +\(\)", out)
    assert main(["train", "--recipe", "orl", "--preset", "smoke", "--tasks-file", str(data), "--set", "tasks=qa,split",
                 "--show-config"]) == 0
    assert re.search(r"\ntasks +tuple +\('qa', 'split'\)", capsys.readouterr().out)


# --- docs/TASKS.md ----------------------------------------------------------------------------------

def test_the_walkthrough_files_load_and_its_commands_parse(tmp_path, monkeypatch):
    import shlex
    from pathlib import Path

    from orl.cli import build_parser

    doc = (Path(__file__).parents[1] / "docs" / "TASKS.md").read_text()
    files = dict(re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", doc, re.S))
    assert set(files) == {"my_tasks.py", "qa.jsonl"}
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)  # the commands name the files relative to where they run
    assert load_tasks(["my_tasks.py"], ["qa.jsonl"]) == ["cumsum_credit", "reverse", "qa"]
    credit, reverse = get_task("cumsum_credit"), get_task("reverse")
    s = credit.sample("train", 0)
    sums = s.answer.split(",")
    assert reward_of(credit, s.prompt, s.answer) == 1.0 and credit.verify(s.prompt, s.answer)
    wrong = ",".join(sums[:3] + ["0"] + sums[4:])
    assert reward_of(credit, s.prompt, wrong) == pytest.approx(3 / len(sums))
    assert reward_of(credit, s.prompt, s.answer + ",1") == pytest.approx(len(sums) / (len(sums) + 1))
    r = reverse.sample("heldout", 0)
    assert reverse.verify(r.prompt, r.answer) and reward_of(reverse, r.prompt, r.answer[1:]) == 0.0
    qa = get_task("qa")
    assert qa.verify("half of 7:", "3.50") and qa.verify("capital of France:", "paris")
    commands = [line for block in re.findall(r"```bash\n(.*?)```", doc, re.S) for line in block.splitlines()
                if line.startswith("orl ")]
    assert len(commands) == 10
    parser = build_parser()
    for line in commands:
        argv = shlex.split(line)[1:]
        args = parser.parse_args(argv)
        assert args.func.__name__ == f"cmd_{args.cmd}"
        if args.cmd == "demo":  # the base trained on the walkthrough's tasks, shown on them
            assert args.task_module == ["my_tasks.py"] and args.orl == "none"
        if args.cmd == "tasks":  # instant: run it
            assert main(argv + ["--samples", "5"]) == 0
        elif args.cmd == "train":  # every --set is a real setting with a valid value
            assert main(argv + ["--show-config"]) == 0


def test_a_rerun_on_an_edited_tasks_file_is_refused_not_mixed(base, tmp_path, capsys):
    """Before: records resume by prompt id only; a row inserted at the top shifted every id, the old answers were
    kept for the new prompts and the last prompt was counted twice (n = 4 for 3 prompts, no warning)."""
    rows = [{"prompt": f"p{i}:", "answer": "x", "split": "heldout"} for i in range(3)]
    data, out = jsonl(tmp_path / "qa.jsonl", rows), tmp_path / "r.jsonl"
    argv = ["eval", "--model", str(base), "--tasks-file", str(data), "--out", str(out), "--block-len", "8",
            "--max-new-tokens", "8", "--no-progress"]
    assert main(argv) == 0
    jsonl(data, [{"prompt": "new:", "answer": "x", "split": "heldout"}, *rows])
    before = out.read_bytes()
    assert main(argv) == 2
    assert "its records hold prompt id qa/heldout/0 for the prompt 'p0:'" in capsys.readouterr().err
    assert out.read_bytes() == before


def test_a_threshold_given_twice_is_decoded_once(base, tmp_path):
    """Before: the second copy of an identical config was decoded and written again (a fake pass@2)."""
    data, out = jsonl(tmp_path / "qa.jsonl", [{"prompt": "p:", "answer": "x", "split": "heldout"}]), tmp_path / "r.jsonl"
    assert main(["eval", "--model", str(base), "--tasks-file", str(data), "--out", str(out), "--block-len", "8",
                 "--max-new-tokens", "8", "--thresholds", "0.9,0.9", "--no-progress"]) == 0
    assert len(read_records(out)) == 1


def test_answers_longer_than_the_budget_are_warned_about(base, tmp_path, capsys):
    rows = [{"prompt": "p:", "answer": "x" * 12, "split": "heldout"}, {"prompt": "q:", "answer": "y", "split": "heldout"}]
    data = jsonl(tmp_path / "qa.jsonl", rows)
    assert main(["eval", "--model", str(base), "--tasks-file", str(data), "--out", str(tmp_path / "r.jsonl"),
                 "--block-len", "8", "--max-new-tokens", "8", "--no-progress"]) == 0
    assert ("1 of 2 qa reference answers need 13 tokens with EOS, more than --max-new-tokens 8"
            in capsys.readouterr().err)
