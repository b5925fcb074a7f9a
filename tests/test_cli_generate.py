"""`orl generate` end to end on a tiny random checkpoint: text + summary line, step-by-step view,
flag validation with exit status 2 and a message naming the bad flag."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from orl.checkpoint import save_checkpoint
from orl.cli import main
from orl.engine import DecodeConfig, Engine
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

SUMMARY = re.compile(r"^tokens: (\d+)  forwards: (\d+) \((\d+) denoise \+ (\d+) commit\)  TPF: ([\d.]+)  "
                     r"tokens/s: ([\d.]+)", re.M)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli") / "tiny"
    tok = CharTokenizer()
    save_checkpoint(random_model(vocab_size=tok.vocab_size), tok, d)
    return d


def orl_cmd() -> list[str]:
    script = Path(sys.executable).parent / "orl"
    return [str(script)] if script.exists() else [sys.executable, "-m", "orl.cli"]


def run_orl(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(orl_cmd() + list(args), capture_output=True, text=True, timeout=120, env=env)


def test_generate_prints_text_and_summary(ckpt):
    flags = ["--block-len", "4", "--max-new-tokens", "10", "--threshold", "0.5", "--residual", "rcd"]
    p = run_orl("generate", "--model", str(ckpt), "hello", *flags)
    assert p.returncode == 0, p.stderr
    m = SUMMARY.search(p.stdout)
    assert m, p.stdout
    n, fw, den, com, tpf = int(m[1]), int(m[2]), int(m[3]), int(m[4]), float(m[5])
    # the same decode in process gives the same text and counts
    engine = Engine.from_checkpoint(ckpt)
    g = engine.generate("hello", DecodeConfig(block_len=4, max_new_tokens=10, threshold=0.5, residual="rcd"))[0]
    assert (n, fw, den, com) == (g.n_tokens, g.forwards, g.step_forwards, g.commit_forwards)
    # 10 tokens in blocks of 4: three blocks, whose commit forwards ride on the next block's first
    # step (the fused commit forward, on by default), so none is counted apart
    assert len(g.block_steps) == 3 and com == 0 and fw == den + com and tpf == pytest.approx(n / fw, abs=0.01)
    assert p.stdout[: m.start()] == g.text + "\n"


def test_generate_bad_threshold_exits_2_naming_it(ckpt):
    p = run_orl("generate", "--model", str(ckpt), "hello", "--threshold", "1.5")
    assert p.returncode == 2
    assert "threshold" in p.stderr and "1.5" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_generate_show_steps(ckpt, capsys, one_thread):
    assert main(["generate", "--model", str(ckpt), "ab", "--block-len", "8", "--max-new-tokens", "12",
                 "--threshold", "0.5", "--show-steps"]) == 0
    out = capsys.readouterr().out
    steps = re.findall(r"^block (\d+) step (\d+): (.*)  \(\+(\d+)\)$", out, re.M)
    m = SUMMARY.search(out)
    assert m and len(steps) == int(m[3])                       # one line per denoising step
    assert [s[:2] for s in steps][:2] == [("0", "1"), ("0", "2")]
    assert {s[0] for s in steps} == {"0", "1"}
    assert all("[" in s[2] for s in steps)                     # every step commits something
    first = steps[0][2]
    assert "_" in first                                        # still masked positions after step 1
    assert sum(int(s[3]) for s in steps) == int(m[1])          # no EOS here: every position committed once
    last_of_block0 = [s for s in steps if s[0] == "0"][-1][2]
    assert "_" not in last_of_block0


@pytest.mark.parametrize("flags,word", [
    (["--rule", "fastest"], "rule"),
    (["--residual", "soft"], "residual"),
    (["--block-len", "-2"], "block_len"),
    (["--max-new-tokens", "0"], "max_new_tokens"),
    (["--temperature", "-1"], "temperature"),
    (["--confidence", "loudest"], "confidence"),
])
def test_generate_bad_flags_in_process(ckpt, capsys, flags, word):
    assert main(["generate", "--model", str(ckpt), "hi", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("orl generate: error:") and word in err


def test_generate_missing_checkpoint_and_bad_prompt(ckpt, tmp_path, capsys, one_thread):
    assert main(["generate", "--model", str(tmp_path / "nope"), "hi"]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["generate", "--model", str(ckpt), "caf\u00e9"]) == 2       # not in the char vocabulary
    assert "position 3" in capsys.readouterr().err
    assert main(["generate", "--model", str(ckpt), ""]) == 2
    assert "empty" in capsys.readouterr().err


def test_generate_defaults_come_from_the_manifest(tmp_path, capsys, one_thread):
    tok = CharTokenizer()
    d = tmp_path / "with_manifest"
    save_checkpoint(random_model(vocab_size=tok.vocab_size), tok, d, manifest={"block_len": 4, "residual_mode": "rcd"})
    assert main(["generate", "--model", str(d), "hi", "--max-new-tokens", "6", "--threshold", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "[threshold, block 4, residual rcd]" in out
    m = SUMMARY.search(out)
    assert int(m[4]) == 0 and int(m[2]) >= 2                  # 6 tokens in blocks of 4: two blocks (fused commit)
    assert main(["generate", "--model", str(d), "hi", "--max-new-tokens", "6", "--block-len", "8",
                 "--residual", "off"]) == 0
    assert "[threshold, block 8, residual off]" in capsys.readouterr().out


def test_generate_reads_the_manifest_once(tmp_path, capsys, monkeypatch, one_thread):
    import builtins

    tok = CharTokenizer()
    d = tmp_path / "once"
    save_checkpoint(random_model(vocab_size=tok.vocab_size), tok, d, manifest={"block_len": 4, "residual_mode": "rcd"})
    reads = []
    for name in ("read_text", "read_bytes"):
        real = getattr(Path, name)
        monkeypatch.setattr(Path, name, lambda self, *a, _real=real, **k: (reads.append(self.name), _real(self, *a, **k))[1])
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda f, *a, **k: (reads.append(Path(str(f)).name), real_open(f, *a, **k))[1])
    assert main(["generate", "--model", str(d), "hi", "--max-new-tokens", "6"]) == 0
    assert "[threshold, block 4, residual rcd]" in capsys.readouterr().out
    assert reads.count("orl.json") == 1, reads


def test_generate_on_an_autoregressive_model_refuses_block_flags():
    # the shipped AR peer decodes with the AR decoder: a block-decoder flag would be silently ignored
    ar = Path(__file__).resolve().parents[1] / "checkpoints" / "orl-tiny-ar"
    r = run_orl("generate", "cumsum:314=", "--model", str(ar), "--threshold", "0.5", "--rule", "topk")
    assert r.returncode == 2, r.stderr
    assert "--rule, --threshold" in r.stderr and "autoregressive" in r.stderr
    ok = run_orl("generate", "cumsum:314=", "--model", str(ar), "--max-new-tokens", "4", "--chunk-steps", "2")
    assert ok.returncode == 0, ok.stderr
    assert "[autoregressive]" in ok.stdout


def test_python_dash_m_orl_is_the_orl_command(ckpt):
    """`python -m orl` (orl/__main__.py) parses and runs like the installed script, exit code included."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "orl", "generate", "--model", str(ckpt), "hello", "--block-len", "4",
                        "--max-new-tokens", "4"], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0 and "TPF" in p.stdout, p.stderr
    bad = subprocess.run([sys.executable, "-m", "orl", "no-such-command"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


@pytest.mark.parametrize("flags", [[], ["--spec-tokens", "8", "--spec-draft", "fused"]])
def test_show_steps_is_refused_where_no_denoising_steps_exist(capsys, flags):
    """--show-steps on the AR decoder (an AR model, or a self-speculative decode) printed nothing and no error."""
    from pathlib import Path

    ck = Path(__file__).resolve().parents[1] / "checkpoints"
    model = ck / ("orl-tiny7-base" if flags else "orl-tiny7-ar")
    assert main(["generate", "--model", str(model), "?+?=U2V4W3:U", "--show-steps", *flags]) == 2
    err = capsys.readouterr().err
    assert "--show-steps: not used by the autoregressive decoder" in err and "--spec-groups" in err
