"""Stop strings (orl/engine/stops.py, OpenAI's `stop`): the pure helpers on hand-computed cases; every
decoder (block engine, full_sequence layout, AR, speculative AR) against its own unstopped output (a
stop cuts the same tokens where the stop string is completed, never changes them); the server with the
openai client (text before the stop, finish_reason 'stop', no stop string in any streamed delta); the
CLI flag; and k-shot eval tasks, which stop at their newline."""
from __future__ import annotations

import pytest

from orl.cli import main
from orl.cli_decode import unescape
from orl.engine import DecodeConfig, Engine
from orl.engine.ar import ARConfig, ARDecoder
from orl.engine.stops import StopHit, Stops, as_stops, earliest, held_back, stop_problems
from orl.eval.runner import EvalSpec, run_eval
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model
from test_ar import tiny_ar
from test_serve import MODEL, SETTINGS, get, serving, tiny_checkpoint

TOK = CharTokenizer()
pytestmark = pytest.mark.usefixtures("one_thread")


# --- pure helpers -------------------------------------------------------------------------------------

def test_earliest_is_the_first_occurrence_and_the_longest_at_a_tie():
    assert earliest("abcabc", ("c", "b")) == (1, "b")
    assert earliest("abcabc", ("bc", "b")) == (1, "bc")
    assert earliest("abc", ("x",)) is None


def test_held_back_keeps_a_tail_that_may_become_a_stop_string():
    assert held_back("hello wor", ("world",)) == "hello "
    assert held_back("hello", ("world",)) == "hello"
    assert held_back("ab\n", ("\n\n",)) == "ab"
    assert held_back("abc", ("\n",)) == "abc"  # a one-character stop is never partial
    assert held_back("", ("xy",)) == ""


def test_config_forms_and_problems():
    assert as_stops(None) == () and as_stops("\n") == ("\n",) and as_stops(["a", "b"]) == ("a", "b")
    assert DecodeConfig(stop="\n").stop == ("\n",) and ARConfig(stop=["x"]).stop == ("x",)
    assert stop_problems(("a", "b")) == []
    assert "at most 16" in stop_problems(("a",) * 17)[0]
    assert "must not be empty" in stop_problems(("",))[0]
    assert "at most 256 characters" in stop_problems(("x" * 257,))[0]
    assert "string or a list of strings" in stop_problems((1,))[0]
    for cfg in (DecodeConfig(stop=["a", ""]), ARConfig(stop=["a"] * 17), DecodeConfig(stop=3)):
        with pytest.raises(ValueError, match="stop"):
            cfg.validate()


def test_find_returns_the_fewest_tokens_that_complete_a_stop():
    stops = Stops(TOK, ("c d",))
    ids = TOK.encode("ab c d ef c d")
    assert stops.find(ids) == StopHit(n_tokens=6, text="ab ", stop="c d")
    assert stops.find(ids, checked=4) == StopHit(6, "ab ", "c d")  # a stop across the checked boundary
    assert stops.find(TOK.encode("ab c")) is None
    assert Stops(TOK, ()).find(ids) is None
    assert stops.visible(TOK.encode("ab c "), None) == "ab "  # "c " may become "c d"
    assert stops.visible(ids, stops.find(ids)) == "ab "


def test_unescape_reads_newline_and_tab():
    assert unescape(r"\n") == "\n" and unescape(r"a\tb") == "a\tb" and unescape(r"\\n") == "\\n"
    assert unescape("plain") == "plain"


@pytest.fixture(scope="module")
def byte_tok(tmp_path_factory):
    """A byte-level BPE tokenizer without merges (GPT-2 / Qwen style bytes): "é" is two tokens, so a block
    can end inside a character, whose half decodes to U+FFFD."""
    import json

    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers.pre_tokenizers import ByteLevel

    from orl.tokenizer import HFTokenizer

    vocab = {ch: i for i, ch in enumerate(sorted(ByteLevel.alphabet()))}
    vocab["<eos>"] = len(vocab)
    t = tokenizers.Tokenizer(tokenizers.models.BPE(vocab=vocab, merges=[]))
    t.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = tokenizers.decoders.ByteLevel()
    d = tmp_path_factory.mktemp("bytetok")
    t.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<eos>"}))
    return HFTokenizer(d)


def test_a_stream_holds_back_a_stop_whose_next_character_is_split(byte_tok):
    """Block 1 ends with 'a' + the first byte of 'é' (text 'xa' + U+FFFD); the stop is 'aé': the 'a' must
    not be shown before block 2 decides it (the server's deltas strip a trailing U+FFFD)."""
    from orl.engine.sequence import Row

    e = byte_tok.encode("é")
    row = Row([0], stops=Stops(byte_tok, ("aé",)))
    row.add_block(byte_tok.encode("xa") + e[:1], 1, byte_tok.eos_id, 0.0, last=False)
    assert row.text(byte_tok) == "x"
    row.add_block(e[1:] + byte_tok.encode("yz"), 1, byte_tok.eos_id, 0.0, last=True)
    assert row.finished and row.generation(byte_tok, 0.0).text == "x" and row.text(byte_tok) == "x"


def test_windowed_find_equals_whole_text_search(byte_tok):
    """Stops.find decodes only a window before the new tokens; checked chunk by chunk it must find the same
    cut as a search of every prefix's whole text, with multi-byte characters split anywhere."""
    import random

    rng = random.Random(0)
    chars = "ab \né€😀"
    for _ in range(150):
        text = "".join(rng.choice(chars) for _ in range(rng.randrange(5, 40)))
        ids = byte_tok.encode(text)
        stop = tuple({"".join(rng.choice(chars) for _ in range(rng.randrange(1, 4))) for _ in range(2)})
        stops = Stops(byte_tok, stop)
        want = next((k for k in range(1, len(ids) + 1) if earliest(byte_tok.decode(ids[:k]), stop)), None)
        got, checked = None, 0
        while got is None and checked < len(ids):
            upto = min(len(ids), checked + rng.randrange(1, 6))
            got, checked = stops.find(ids[:upto], checked), upto
        assert (got.n_tokens if got else None) == want, (text, stop)
        if got:
            i, s = earliest(byte_tok.decode(ids[:want]), stop)
            assert (got.text, got.stop) == (byte_tok.decode(ids[:want])[:i], s)


# --- decoders: a stop cuts the unstopped output, nothing else ----------------------------------------

def _pick_stop(text: str) -> str:
    """A two-character stop string from the middle of text, and where it first occurs."""
    assert len(text) >= 8, text
    return text[4:6]


def _check_cut(plain, stopped, stop: str):
    i = plain.text.index(stop)  # the first occurrence: the one the decoder must stop at
    assert stopped.text == plain.text[:i]
    assert stopped.token_ids == plain.token_ids[: i + len(stop)]  # a char tokenizer: one token per character
    assert stopped.finished and stopped.stop == stop
    assert stopped.forwards <= plain.forwards


@pytest.fixture(scope="module")
def engine():
    return Engine(random_model(vocab_size=TOK.vocab_size, eos_bias=-1e4), TOK)


@pytest.mark.parametrize("layout", ["prompt_block", "absolute_grid", "full_sequence"])
def test_engine_stops_where_the_stop_string_is_completed(engine, layout):
    cfg = DecodeConfig(block_len=4, max_new_tokens=24, threshold=0.5, layout=layout)
    plain = engine.generate(["hello", "a longer prompt"], cfg)
    stop = _pick_stop(plain[0].text)
    stopped = engine.generate(["hello", "a longer prompt"], DecodeConfig(**{**cfg.to_dict(), "stop": [stop, "@@@@"]}))
    _check_cut(plain[0], stopped[0], stop)
    if stop not in plain[1].text:  # the other row runs on as before
        assert stopped[1].token_ids == plain[1].token_ids and stopped[1].stop is None


def test_engine_stream_never_shows_a_stop_string(engine):
    cfg = DecodeConfig(block_len=4, max_new_tokens=24, threshold=0.5)
    plain = engine.generate("hello", cfg)[0]
    stop = plain.text[3:9]  # spans blocks: its first characters arrive before it is complete
    texts = [e.text[0] for e in engine.stream("hello", DecodeConfig(**{**cfg.to_dict(), "stop": stop}))
             if hasattr(e, "text")]
    assert texts and all(stop not in t and plain.text.startswith(t) for t in texts)
    assert texts[-1] == plain.text[: plain.text.index(stop)]


@pytest.fixture(scope="module")
def ar():
    return ARDecoder(tiny_ar(), TOK)


@pytest.mark.parametrize("chunk_steps", [1, 8])
def test_ar_stops_where_the_stop_string_is_completed(ar, chunk_steps):
    prompts = ["hello", "the quick brown fox"]
    cfg = ARConfig(max_new_tokens=24, chunk_steps=chunk_steps)
    plain = ar.generate(prompts, cfg)
    long_row = max(range(2), key=lambda b: len(plain[b].text))
    stop = _pick_stop(plain[long_row].text)
    stopped = ar.generate(prompts, ARConfig(max_new_tokens=24, chunk_steps=chunk_steps, stop=(stop,)))
    _check_cut(plain[long_row], stopped[long_row], stop)
    assert stopped[long_row].step_forwards == len(stopped[long_row].token_ids)  # AR: one forward per token


def test_speculative_ar_stops_where_plain_ar_does(ar):
    plain = ar.generate("the quick brown fox", ARConfig(max_new_tokens=24))[0]
    stop = _pick_stop(plain.text)
    spec = ar.generate("the quick brown fox", ARConfig(max_new_tokens=24, spec_tokens=4, stop=(stop,)))[0]
    _check_cut(plain, spec, stop)


# --- server, CLI, eval ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.mktemp("stops"))


@pytest.fixture(scope="module")
def server(ckpt):
    with serving(ckpt) as url:
        yield url


def test_server_stop_with_the_openai_client(server, ckpt):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)
    plain = client.completions.create(model=MODEL, prompt="hello", max_tokens=20, extra_body=SETTINGS).choices[0]
    stop = plain.text[5:8]
    cut = plain.text[: plain.text.index(stop)]
    r = client.completions.create(model=MODEL, prompt="hello", max_tokens=20, stop=[stop], extra_body=SETTINGS)
    assert (r.choices[0].text, r.choices[0].finish_reason) == (cut, "stop")
    assert r.usage.completion_tokens == len(cut) + len(stop)  # the tokens paid for, the stop string's included
    chunks = list(client.completions.create(model=MODEL, prompt="hello", max_tokens=20, stop=stop, stream=True,
                                            extra_body=SETTINGS))
    deltas = [c.choices[0].text for c in chunks]
    assert "".join(deltas) == cut and not any(stop in d for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "stop"
    with pytest.raises(openai.BadRequestError, match="at most 16"):
        client.completions.create(model=MODEL, prompt="hello", max_tokens=4, stop=list("abcdefghijklmnopq"))
    assert get(server, "/health")["status"] == "ok"


def test_cli_generate_stop_flag(ckpt, capsys):
    assert main(["generate", "--model", str(ckpt), "hello", "--max-new-tokens", "20",
                 "--block-len", "4"]) == 0
    plain = capsys.readouterr().out.splitlines()[0]
    stop = plain[5:8]
    assert main(["generate", "--model", str(ckpt), "hello", "--max-new-tokens", "20",
                 "--block-len", "4", "--stop", stop]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == plain[: plain.index(stop)] and f"stop: stop string {stop!r}" in out[1]


def test_k_shot_eval_stops_at_the_newline(ckpt, tmp_path):
    """A k-shot task decodes with its newline stop (recorded in the decode settings); a plain task does not."""
    recs = run_eval(EvalSpec(model=str(ckpt), out=str(tmp_path / "r.jsonl"), tasks=["add:2shot", "add"], limit=3,
                             decode={"block_len": 4, "max_new_tokens": 24}, batch_size=2, progress=False))
    shot = [r for r in recs if r["task"] == "add:2shot"]
    plain = [r for r in recs if r["task"] == "add"]
    assert len(shot) == len(plain) == 3
    assert all(r["decode"]["stop"] == ["\n"] for r in shot) and all(r["decode"]["stop"] == [] for r in plain)
    assert all("\n" not in r["output_text"] for r in shot)
    assert all(r["finished"] or r["n_tokens"] == 24 for r in shot)


def test_eos_free_tpf_keeps_a_stop_strings_last_token():
    from orl.eval.metrics import pooled_tpf
    fwd = {"step": 4, "commit": 0}
    recs = [{"n_tokens": 6, "finished": True, "stop": None, "forwards": fwd},     # ended at EOS
            {"n_tokens": 6, "finished": True, "stop": "\n", "forwards": fwd},    # ended at a newline stop
            {"n_tokens": 8, "finished": False, "forwards": fwd}]                 # an old record: no "stop" field
    assert pooled_tpf(recs)["tpf"] == pytest.approx(20 / 12)
    assert pooled_tpf(recs)["tpf_no_eos"] == pytest.approx(19 / 12)
