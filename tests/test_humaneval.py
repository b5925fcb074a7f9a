"""HumanEval: the canonical solutions all pass in the sandbox (fast enough, in parallel); wrong,
hanging, memory-hungry, forking, network-using and file-deleting solutions all score 0 without
harming the host; prompt construction and completion extraction; pass@k over sandbox results."""
from __future__ import annotations

import glob
import os
import socket
import tempfile
import time
from pathlib import Path

import pytest

from orl.eval import metrics, sandbox
from orl.eval.humaneval import BASE_STOPS, HumanEval, check, check_many, extract_completion, load_problems, program
from orl.eval.sandbox import Limits
from orl.tokenizer import CharTokenizer

PROBLEMS = load_problems()
TRUNCATE = PROBLEMS[2]  # truncate_number(number: float) -> float: the decimal part
RIGHT = "    return number % 1.0\n"
namespaces = pytest.mark.skipif(sandbox.isolation() != "namespaces",
                                reason="needs root with unshare/setpriv (sandbox isolation 'namespaces')")


@pytest.fixture(autouse=True)
def no_leftover_workdirs():
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "orl-sandbox-*")))
    yield
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), "orl-sandbox-*")))
    assert not after - before, "the sandbox left its working directory behind"


def processes_of(uid: int) -> list[int]:
    pids = []
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            text = Path(status).read_text()
        except OSError:
            continue  # exited while we looked
        uids = next(line for line in text.splitlines() if line.startswith("Uid:")).split()[1:]
        if str(uid) in uids:
            pids.append(int(status.split("/")[2]))
    return pids


def test_problems_load():
    assert len(PROBLEMS) == 164
    assert [p.index for p in PROBLEMS] == list(range(164))
    assert TRUNCATE.entry_point == "truncate_number"


def test_canonical_solutions_pass_164_of_164_in_parallel_quickly():
    t0 = time.perf_counter()
    results = check_many([(p, p.canonical_solution) for p in PROBLEMS], parallelism=2)
    elapsed = time.perf_counter() - t0
    failed = [(p.task_id, r.status, r.stderr[-200:]) for p, r in zip(PROBLEMS, results) if not r.passed]
    assert not failed
    assert elapsed < 60, f"164 canonical solutions took {elapsed:.1f}s"


def test_wrong_solution_fails():
    r = check(TRUNCATE, "    return number\n")
    assert r.status == "failed" and "AssertionError" in r.stderr
    assert check(TRUNCATE, RIGHT).passed  # the same problem passes with a right body


def test_infinite_loop_times_out():
    t0 = time.perf_counter()
    r = check(TRUNCATE, "    while True:\n        pass\n", limits=Limits(wall_s=2.0))
    assert r.status == "timeout" and not r.passed
    assert time.perf_counter() - t0 < 6


def test_allocating_10_gb_fails_under_the_memory_limit():
    # untouched, so even without the limit it would not commit 10 GB of host memory
    r = check(TRUNCATE, "    block = bytearray(10 * 1024 ** 3)\n" + RIGHT)
    assert r.status == "failed" and "MemoryError" in r.stderr


@namespaces
def test_fork_bomb_is_bounded_and_leaves_no_process():
    # would pass if it could start 200 processes (each lingering for 60 s)
    bomb = ("    import os, time\n"
            "    for _ in range(200):\n"
            "        if os.fork() == 0:\n"
            "            time.sleep(60)\n"
            "            os._exit(0)\n" + RIGHT)
    t0 = time.perf_counter()
    r = check(TRUNCATE, bomb, limits=Limits(wall_s=5.0, processes=16))
    assert r.status == "failed" and ("BlockingIOError" in r.stderr or "Resource temporarily unavailable" in r.stderr)
    assert time.perf_counter() - t0 < 8
    assert processes_of(r.uid) == []


def test_network_is_unreachable():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        leak = (f"    import socket\n"
                f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\n" + RIGHT)
        r = check(TRUNCATE, leak)
        assert r.status == "failed"
        assert "Network is unreachable" in r.stderr or "network access is disabled" in r.stderr
        with pytest.raises(TimeoutError):
            server.accept()


@namespaces
def test_cannot_delete_or_change_files_outside_its_workdir():
    victim_dir = tempfile.mkdtemp(prefix="orl-victim-")
    try:
        os.chmod(victim_dir, 0o755)  # readable like most of the filesystem, writable by its owner only
        victim = Path(victim_dir, "precious.txt")
        victim.write_text("keep me")
        victim.chmod(0o644)
        attack = (f"    import os, shutil\n"
                  f"    shutil.rmtree({victim_dir!r}, ignore_errors=True)\n"
                  f"    try:\n"
                  f"        open({str(victim)!r}, 'w').write('gone')\n"
                  f"    except OSError:\n"
                  f"        pass\n"
                  f"    os.remove({str(victim)!r})\n" + RIGHT)
        r = check(TRUNCATE, attack)
        assert r.status == "failed" and "PermissionError" in r.stderr
        assert victim.read_text() == "keep me"
    finally:
        for f in Path(victim_dir).iterdir():
            f.unlink()
        os.rmdir(victim_dir)


def test_base_completion_stops_at_the_next_top_level_statement():
    out = RIGHT + "\n\ndef other():\n    pass\n"
    assert extract_completion(out, chat=False) == RIGHT + "\n"
    assert extract_completion(RIGHT + "\nprint(truncate_number(3.5))\n", chat=False) == RIGHT
    assert extract_completion("    x = 1\n    # keep\n    return x\n#top\n", chat=False) == "    x = 1\n    # keep\n    return x"


def test_chat_answer_is_unfenced_and_replaces_the_stub():
    fn = "def truncate_number(number: float) -> float:\n" + RIGHT
    answer = f"Sure! Here it is:\n```python\n{fn}\nprint(truncate_number(3.5))\n```\nIt keeps the fraction."
    code = extract_completion(answer, chat=True)
    assert code == fn
    assert "```" not in program(TRUNCATE, code, chat=True)
    assert check(TRUNCATE, answer, chat=True).passed
    assert not check(TRUNCATE, answer.replace("% 1.0", "// 1.0"), chat=True).passed
    assert check(TRUNCATE, fn, chat=True).passed  # unfenced answers are taken whole


def test_task_interface_and_pass_at_k():
    task = HumanEval()
    s = task.sample("heldout", 2)
    assert s.prompt == TRUNCATE.prompt and s.task == "humaneval"
    assert task.verify(s.prompt, RIGHT) and not task.verify(s.prompt, "    return 0.0\n")
    with pytest.raises(ValueError):
        task.sample("train", 0)
    chat = HumanEval(CharTokenizer(), chat=True)
    assert TRUNCATE.prompt in chat.sample("heldout", 2).prompt
    # a base decode stops at the Codex stop sequences (orl.engine.stops): the text before the first one
    # is what extraction judges anyway, so stopping there changes no verdict
    assert task.stop == BASE_STOPS and chat.stop == ()
    from orl.engine.stops import earliest
    for out in (RIGHT + "\n\ndef other():\n    pass\n", RIGHT + "\nprint(1)\n", "    return 1\n#top\n"):
        i, _ = earliest(out, task.stop)
        assert extract_completion(out[:i], chat=False) == extract_completion(out, chat=False)
    # 4 draws of one problem, 2 right: pass@1 = 0.5, pass@2 = 1 - C(2,2)/C(4,2) = 5/6
    draws = [RIGHT, "    return number\n", RIGHT, "    return -1.0\n"]
    results = check_many([(TRUNCATE, d) for d in draws])
    c = sum(r.passed for r in results)
    assert c == 2
    assert metrics.pass_at_k(4, c, 2) == pytest.approx(5 / 6)
