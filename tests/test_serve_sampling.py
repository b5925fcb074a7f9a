"""The server's sampling knobs (issue 18): OpenAI's `top_p` and the extension fields `top_k`, `alg_temp`
and the llada21 / fast_dllm_v2 knobs reach the engine (a real HTTP client's answer equals a direct engine
call with the same seed and differs without the knob), their ranges are named 400s, and a decode that
draws only through alg_temp (temperature 0) gets and reports a seed like a sampled one."""
from __future__ import annotations

import openai
import pytest

from orl.engine import DecodeConfig, Engine
from orl.engine.config import RULES
from orl.serve import ServerConfig, create_app
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model
from test_serve import SETTINGS, ThreadedServer, counts, get, post, tiny_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")
MODEL = "tiny"


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    return Engine.from_checkpoint(tiny_checkpoint(tmp_path_factory.mktemp("serve_sampling")))


@pytest.fixture(scope="module")
def url(engine):
    with ThreadedServer(create_app(engine, MODEL, config=ServerConfig(timeout_s=60.0))) as u:
        yield u


@pytest.fixture(scope="module")
def client(url) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)


def direct(engine, prompt, **kw) -> str:
    return engine.generate(prompt, DecodeConfig(max_new_tokens=12, **{**SETTINGS, **kw}))[0].text


def test_top_p_and_top_k_are_decoded_with(client, engine):
    sampled = dict(temperature=1.5, seed=7)
    r = client.completions.create(model=MODEL, prompt="hello", max_tokens=12, top_p=0.3, seed=7,
                                  temperature=1.5, extra_body=SETTINGS)
    assert r.choices[0].text == direct(engine, "hello", top_p=0.3, **sampled)
    assert r.choices[0].text != direct(engine, "hello", **sampled)  # the nucleus changed this answer
    assert r.seed == 7
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=12,
                                          seed=7, temperature=1.5, extra_body={**SETTINGS, "top_k": 2})
    assert chat.choices[0].message.content == direct(engine, "hi", top_k=2, **sampled)
    assert chat.choices[0].message.content != direct(engine, "hi", **sampled)
    # top_p 1 stays accepted (clients send it by default) and is no truncation
    same = client.completions.create(model=MODEL, prompt="hello", max_tokens=12, top_p=1.0, seed=7,
                                     temperature=1.5, extra_body=SETTINGS)
    assert same.choices[0].text == direct(engine, "hello", **sampled)


@pytest.mark.parametrize("knobs,each", [
    # sampled, with re-edits at any confidence: on this tiny model every proposal's p is small, so with
    # editing_threshold 0.2 (as before) no edit ever happened and the test could not tell it was passed
    (dict(threshold=0.02, temperature=1.5, seed=0), ("editing_threshold", "max_post_steps", "num_to_transfer")),
    (dict(threshold=0.005, temperature=1.5, seed=1), ("threshold",))])
def test_llada21_knobs_reach_the_engine(client, engine, knobs, each):
    knobs = dict(rule="llada21", editing_threshold=0.0, max_post_steps=1, num_to_transfer=2, **knobs)
    r = client.completions.create(model=MODEL, prompt="abc", max_tokens=12, extra_body={**SETTINGS, **knobs})
    want = direct(engine, "abc", **knobs)
    assert r.choices[0].text == want
    for name in each:  # a server that dropped this knob would answer with its default: a different answer
        default = {**knobs, name: SETTINGS.get(name, getattr(DecodeConfig, name))}
        assert direct(engine, "abc", **default) != want, name


OK = {"model": MODEL, "prompt": "hi", "max_tokens": 4}


@pytest.mark.parametrize("field,value,words", [
    ("top_p", 0, "greater than 0"), ("top_p", 1.5, "less than or equal to 1"), ("top_p", "0.5", "valid number"),
    ("top_k", -1, "greater than or equal to 0"), ("top_k", 10**30, "less than or equal to"),
    ("alg_temp", -0.5, "greater than or equal to 0"), ("editing_threshold", 2, "less than or equal to 1"),
    ("max_post_steps", 10**6, "less than or equal to 1024"), ("num_to_transfer", 0, "greater than or equal to 1"),
    ("small_block_size", 10**20, "less than or equal to")])
def test_out_of_range_knobs_are_named_400s(url, field, value, words):
    code, out = post(url, "/v1/completions", {**OK, field: value})
    assert code == 400, out
    assert out["error"]["param"] == field and words in out["error"]["message"], out


def test_alg_temp_needs_dream_in_the_full_sequence_layout(url):
    code, out = post(url, "/v1/completions", {**OK, "alg_temp": 0.5})
    assert code == 400 and "alg_temp" in out["error"]["message"] and "full_sequence" in out["error"]["message"]


def test_alg_temp_alone_gets_a_seed():
    """Greedy tokens, drawn positions: the request draws, so it gets a fresh seed and reports it; sent
    back, it reproduces the answer (on a full-sequence Dream-style model)."""
    tok = CharTokenizer()
    model = random_model(7, vocab_size=tok.vocab_size, adapter_dim=0, learned_pos=False, shift_logits=True)
    defaults = DecodeConfig(layout="full_sequence", block_len=10, max_new_tokens=10, rule="dream",
                            confidence="sampled_prob", steps_per_block=4)
    eng = Engine(model, tok)
    with ThreadedServer(create_app(eng, MODEL, defaults=defaults, config=ServerConfig(timeout_s=60.0))) as u:
        code, out = post(u, "/v1/completions", {**OK, "max_tokens": 10, "alg_temp": 0.5})
        assert code == 200 and isinstance(out["seed"], int), out
        code, again = post(u, "/v1/completions", {**OK, "max_tokens": 10, "alg_temp": 0.5, "seed": out["seed"]})
        assert again["choices"][0]["text"] == out["choices"][0]["text"]
        want = eng.generate("hi", DecodeConfig(**{**defaults.to_dict(), "alg_temp": 0.5, "seed": out["seed"]}))
        assert out["choices"][0]["text"] == want[0].text
        code, greedy = post(u, "/v1/completions", {**OK, "max_tokens": 10})
        assert greedy["seed"] is None


def test_a_rule_or_endpoint_the_model_cannot_run_is_a_400_before_queueing(url, engine):
    """fast_dllm_v2 on a model that reads each position off itself, and on a full-sequence server the
    step stream (traces) or a residual mode: refused by name before the engine sees them (they used to
    reach the worker, which counted them as failed)."""
    assert not engine.model.args.shift_logits
    before = counts(url)
    code, out = post(url, "/v1/completions", {**OK, **SETTINGS, "rule": "fast_dllm_v2", "small_block_size": 2})
    assert code == 400 and "shifted model" in out["error"]["message"], out
    assert out["error"]["param"] == "rule" and out["error"]["code"] == "unsupported_value", out  # the field
    assert counts(url) == before
    tok = CharTokenizer()
    model = random_model(7, vocab_size=tok.vocab_size, adapter_dim=0, learned_pos=False, shift_logits=True)
    defaults = DecodeConfig(layout="full_sequence", block_len=10, max_new_tokens=10, rule="dream")
    with ThreadedServer(create_app(Engine(model, tok), MODEL, defaults=defaults)) as u:
        before = counts(u)
        code, out = post(u, "/v1/dlm/stream", {"prompt": "hi", "max_tokens": 10})
        assert code == 400 and "traces" in out["error"]["message"] and out["error"]["param"] is None, out  # no field
        code, out = post(u, "/v1/completions", {**OK, "max_tokens": 10, "residual": "rcd"})
        assert code == 400 and "residual" in out["error"]["message"] and out["error"]["param"] == "residual", out
        assert counts(u) == before


def test_dlm_info_lists_only_the_rules_a_request_can_choose(url, engine):
    """The page's rule menu comes from /v1/dlm/info: it listed every rule, fast_dllm_v2 on a model without
    shifted logits and llada21 / fast_dllm_v2 on a full-sequence model included, each then a 400."""
    rules = get(url, "/v1/dlm/info")["rules"]
    assert "llada21" in rules and "threshold" in rules
    assert "fast_dllm_v2" not in rules  # unshifted
    for rule in set(RULES) - set(rules):
        code, _ = post(url, "/v1/completions", {**OK, **SETTINGS, "rule": rule, "small_block_size": 2})
        assert code == 400, rule
    # dream_origin ranks by uniforms only: a request naming it runs on confidence 'random' (it was listed as a rule
    # and then a 400 asking for a confidence no request could send); another confidence is refused by name
    assert "dream_origin" in rules
    code, out = post(url, "/v1/completions", {**OK, **SETTINGS, "rule": "dream_origin", "seed": 3})
    assert code == 200, out
    code, again = post(url, "/v1/completions", {**OK, **SETTINGS, "rule": "dream_origin", "confidence": "random",
                                                "seed": 3})
    assert code == 200 and again["choices"][0]["text"] == out["choices"][0]["text"], again
    code, out = post(url, "/v1/completions", {**OK, **SETTINGS, "rule": "dream_origin", "confidence": "margin"})
    assert code == 400 and "confidence" in out["error"]["message"] and out["error"]["param"] == "rule", out
    code, out = post(url, "/v1/completions", {**OK, **SETTINGS, "rule": "topk", "steps_per_block": 999})
    assert code == 400 and out["error"]["param"] == "steps_per_block", out  # the config's problem names its field
    tok = CharTokenizer()
    model = random_model(7, vocab_size=tok.vocab_size, adapter_dim=0, learned_pos=False, shift_logits=True)
    shifted = Engine(model, tok)
    with ThreadedServer(create_app(shifted, MODEL, defaults=DecodeConfig(block_len=4))) as u:
        assert "fast_dllm_v2" in get(u, "/v1/dlm/info")["rules"]
    defaults = DecodeConfig(layout="full_sequence", block_len=10, max_new_tokens=10, rule="dream")
    with ThreadedServer(create_app(shifted, MODEL, defaults=defaults)) as u:
        rules = get(u, "/v1/dlm/info")["rules"]
        assert "dream" in rules and not {"llada21", "fast_dllm_v2"} & set(rules)
