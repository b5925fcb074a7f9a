"""Chat templates rendered as transformers renders them (tokenization_utils_base.apply_chat_template with
tokenize=False; utils/chat_template_utils.py), so a prompt built here is byte-identical to the one the
model was trained on:
  - a sandboxed, immutable jinja2 environment with trim_blocks, lstrip_blocks and loop controls;
  - `tojson` without HTML escaping or ASCII escaping, `raise_exception`, `strftime_now`, `dict`;
  - messages with None-valued keys dropped, reasoning under every name templates read
    (reasoning_content, thinking, reasoning);
  - the named special tokens (bos_token, eos_token, ..., as strings) then the caller's template
    kwargs (e.g. enable_thinking=False for Qwen3) as variables, the caller's winning.
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
REASONING = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(ValueError):
    pass


@lru_cache(maxsize=8)
def _compile(template: str):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt),
                       dict=dict)
    return env.from_string(template)


def _message(m: dict) -> dict:
    m = {k: v for k, v in m.items() if v is not None}
    reasoning = next((m[k] for k in REASONING if m.get(k) is not None), None)
    if reasoning is not None:
        m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
    return m


def named_tokens(tokenizer_config: dict) -> dict[str, str]:
    """The named special tokens of a tokenizer_config.json as strings (an AddedToken dict gives its content)."""
    out = {}
    for name in NAMED_TOKENS:
        tok = tokenizer_config.get(name)
        if isinstance(tok, dict):
            tok = tok.get("content")
        if tok is not None:
            out[name] = str(tok)
    return out


def render(template: str, messages: list[dict], specials: dict[str, str], *, add_generation_prompt: bool = True,
           tools: list[dict] | None = None, documents: list[dict] | None = None, **template_kwargs) -> str:
    import jinja2

    try:
        return _compile(template).render(messages=[_message(m) for m in messages], tools=tools, documents=documents,
                                         add_generation_prompt=add_generation_prompt,
                                         **{**specials, **template_kwargs})
    except jinja2.exceptions.TemplateError as e:
        raise ChatTemplateError(f"chat template: {e}") from e
