"""A chat template ships inside a downloaded checkpoint, so it is untrusted input: a runaway one is refused
with ChatTemplateError (a 400 from the server) in bounded time and memory, and real templates render as
before (their parity with transformers is tests/test_tokenizer.py, test_family_tokenizer.py)."""
from __future__ import annotations

import json
import resource
import time

import pytest
import torch

from orl.chat_template import MAX_SECONDS, ChatTemplateError, render

MESSAGES = [{"role": "user", "content": "100%12345678 {x:123456789}"}, {"role": "assistant", "content": "ok"}]

HOSTILE = {
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "string repeat": "{{ 'x' * 10**10 }}",
    "list repeat": "{{ ([1, 2] * 100000000)|length }}",
    "power": "{{ 7 ** 100000000 }}",
    "recursion": "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "endless output": "{% for i in range(100000) %}{% for j in range(100000) %}xxxxxxxxxx{% endfor %}{% endfor %}",
    "percent width": "{{ '%9999999999s'|format(1) }}",
    "format width": "{{ '{:>9999999999}'.format(1) }}",
    "namespace doubling": "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
                          "{% endfor %}{{ ns.s|length }}",
    "macro doubling": "{% macro f(s) %}{{ f(s ~ s) }}{% endmacro %}{{ f('x') }}",
    "center": "{{ 'x'|center(10**10) }}",
    "ljust": "{{ 'x'.ljust(10**10) }}",
    "indent": "{{ 'a\nb'|indent(10**10) }}",
}


@pytest.fixture
def memory_cap():
    """4 GiB of address space above what the process holds: a template that allocates 10 GB fails the
    test with a MemoryError instead of taking the machine down (and the renderer must refuse before)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        held = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (held + (4 << 30), hard))
    yield
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize("name", list(HOSTILE))
def test_runaway_template_is_refused_in_bounded_time(name, memory_cap):
    t0 = time.monotonic()
    with pytest.raises(ChatTemplateError) as e:
        render(HOSTILE[name], MESSAGES, {})
    assert time.monotonic() - t0 < MAX_SECONDS + 3
    assert "MemoryError" not in str(e.value), "refused only because the allocation failed"


def test_ordinary_constructs_still_render():
    t = ("{% set ns = namespace(last=-1) %}{% for i in range(messages|length - 1, -1, -1) %}"
         "{% if ns.last < 0 and messages[i].role == 'user' %}{% set ns.last = i %}{% endif %}{% endfor %}"
         "{{ ns.last }}|{{ range(3)|length }}|{{ range(5)|reverse|list }}|{{ range(1, 7, 2)|list }}|"
         "{{ messages[0].content|trim }}|{{ '%s=%d'|format('a', 3) }}|{{ '{} {:>3}'.format('b', 1) }}|"
         "{{ 'ab' * 2 }}|{{ 2 ** 10 }}|{{ [1] + [2] }}|{{ 'x'|center(5) }}|{% for m in messages %}"
         "{{ loop.index }}/{{ loop.length }}:{{ m.role }}{{ loop.cycle(',', ';') }}{% endfor %}")
    assert render(t, MESSAGES, {}) == ("0|3|[4, 3, 2, 1, 0]|[1, 3, 5]|100%12345678 {x:123456789}|a=3|b   1|"
                                       "abab|1024|[1, 2]|  x  |1/2:user,2/2:assistant;")


def test_server_answers_a_runaway_template_with_400_and_keeps_serving(tmp_path):
    from test_serve import ThreadedServer, get, post
    from test_tokenizer import write_hf_tokenizer

    from orl.engine import Engine
    from orl.model import ModelArgs, Transformer
    from orl.tokenizer import load_tokenizer

    write_hf_tokenizer(tmp_path)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg["chat_template"] = HOSTILE["nested loops"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = load_tokenizer(tmp_path)
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=tok.vocab_size, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
                                  head_dim=16, ffn_dim=64, max_seq_len=128))
    from orl.serve import create_app

    with ThreadedServer(create_app(Engine(model, tok), "hf")) as url:
        chat = {"model": "hf", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        status, body = post(url, "/v1/chat/completions", chat)
        assert status == 400 and "chat template" in json.dumps(body), body
        status, body = post(url, "/v1/completions", {"model": "hf", "prompt": "hello", "max_tokens": 4})
        assert status == 200, body
        health = get(url, "/health")
        assert health["failed"] == 0, health
