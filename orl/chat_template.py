"""Chat templates rendered as transformers renders them (tokenization_utils_base.apply_chat_template with
tokenize=False; utils/chat_template_utils.py), so a prompt built here is byte-identical to the one the
model was trained on:
  - a sandboxed, immutable jinja2 environment with trim_blocks, lstrip_blocks and loop controls;
  - `tojson` without HTML escaping or ASCII escaping, `raise_exception`, `strftime_now`, `dict`;
  - messages with None-valued keys dropped, reasoning under every name templates read
    (reasoning_content, thinking, reasoning);
  - bounded: a template ships inside a downloaded checkpoint, so it is untrusted input. jinja's sandbox
    blocks attribute tricks but not work: nested `range` loops, `'x' * 10**10`, deep recursion or an
    endless output would hang or kill the server. A per-render deadline is checked at every `range`
    step, call, filter and output chunk; `*`/`**`/`+`, call and filter arguments and results, namespace
    assignments and format widths are refused past a size cap before they allocate; the output is
    capped; recursion/memory/overflow errors become ChatTemplateError (a 400) like any template error;
  - the named special tokens (bos_token, eos_token, ..., as strings) then the caller's template
    kwargs (e.g. enable_thinking=False for Qwen3) as variables, the caller's winning.
"""
from __future__ import annotations

import contextvars
import functools
import json
import re
import time
from datetime import datetime
from functools import lru_cache

NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
REASONING = ("reasoning_content", "thinking", "reasoning")


# Real templates render in well under a millisecond into a few kB; these bounds leave orders of magnitude.
MAX_SECONDS = 2.0
MAX_CHARS = 4_000_000  # one rendered prompt, and any one string/list a template builds
MAX_POW = 10**100  # int ** int results beyond this are refused before they are computed

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("chat_template_deadline", default=float("inf"))


class ChatTemplateError(ValueError):
    pass


def _check_time():
    if time.monotonic() > _deadline.get():
        raise ChatTemplateError(f"chat template: rendering took longer than {MAX_SECONDS} s (a runaway loop?)")


class _BoundedRange:
    """range() for templates: len, indexing and reversal as range has; iteration checks the deadline."""

    def __init__(self, *args):
        self.r = args[0] if len(args) == 1 and isinstance(args[0], range) else range(*args)
        if len(self.r) > 100_000:  # jinja's own sandbox limit (MAX_RANGE)
            raise ChatTemplateError(f"chat template: range of {len(self.r)} items is too large")

    def __len__(self):
        return len(self.r)

    def __getitem__(self, i):
        x = self.r[i]
        return _BoundedRange(x) if isinstance(x, range) else x

    def __reversed__(self):
        return iter(_BoundedRange(self.r[::-1]))

    def __iter__(self):
        for x in self.r:
            _check_time()
            yield x


def _size(x) -> int:
    return len(x) if isinstance(x, (str, bytes, list, tuple)) else 0


def _check_values(what: str, values) -> None:
    """Refuse a string/list past the cap, and an int argument that would size one past it (center, ljust,
    indent, format widths)."""
    for v in values:
        if _size(v) > MAX_CHARS or (isinstance(v, int) and not isinstance(v, bool) and v > MAX_CHARS):
            raise ChatTemplateError(f"chat template: {what} got a value past the {MAX_CHARS} limit")


def _check_format(fmt) -> None:
    """A format string's own width ('%999999999s', '{:>999999999}') allocates before any result exists."""
    if isinstance(fmt, str) and re.search(r"(%[-+ #0]*|\{[^{}]*:[^{}]*?)\d{8,}", fmt):
        raise ChatTemplateError(f"chat template: a format width past the {MAX_CHARS} limit")


def _bounded_binop(operator: str, left, right):
    if operator == "*":
        n = right if isinstance(right, int) else left if isinstance(left, int) else 0
        if max(_size(left), _size(right)) * max(n, 0) > MAX_CHARS:
            raise ChatTemplateError(f"chat template: a sequence repeated {n} times exceeds {MAX_CHARS} items")
    elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
        if right * max(abs(left), 2).bit_length() > MAX_POW.bit_length():
            raise ChatTemplateError(f"chat template: {left} ** {right} is too large")
    elif operator == "+" and _size(left) + _size(right) > MAX_CHARS:
        raise ChatTemplateError(f"chat template: a concatenation exceeds {MAX_CHARS} items")
    _check_time()


def _checked_call(what: str, fn, /, *args, **kwargs):
    """fn(*args, **kwargs) between the deadline and size checks (calls and filters a template makes)."""
    _check_time()
    _check_values(what, (*args, *kwargs.values()))
    out = fn(*args, **kwargs)
    _check_values(what, (out,))
    return out


@lru_cache(maxsize=8)
def _compile(template: str):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "+"])

        def call_binop(self, context, operator, left, right):
            _bounded_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

        def wrap_str_format(self, value):  # 'a{:>9}'.format(...) as jinja proxies it
            if getattr(value, "__name__", "") in ("format", "format_map"):
                _check_format(getattr(value, "__self__", None))
            return super().wrap_str_format(value)

        # every call a template makes (macros, globals, methods such as str.ljust) passes here
        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's signature)
            return _checked_call("a call", functools.partial(super().call, __context, __obj), *args, **kwargs)

    class BoundedNamespace(jinja2.utils.Namespace):
        # {% set ns.s = ns.s ~ ns.s %} in a loop doubles a string per iteration, faster than any deadline
        def __setitem__(self, name, value):
            _check_values("a namespace assignment", (value,))
            super().__setitem__(name, value)

    def bounded_filter(name, f):
        @functools.wraps(f)  # keeps jinja's pass_context / pass_environment marker
        def g(*args, **kwargs):
            if name == "format":
                _check_format(args[0])
            return _checked_call("a filter", f, *args, **kwargs)
        return g

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.filters = {name: bounded_filter(name, f) for name, f in env.filters.items()}
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt),
                       dict=dict, range=_BoundedRange, namespace=BoundedNamespace)
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

    token = _deadline.set(time.monotonic() + MAX_SECONDS)
    try:
        chunks, n = [], 0
        # generate() streams the output, so a template that writes forever is stopped at the cap
        for chunk in _compile(template).generate(messages=[_message(m) for m in messages], tools=tools,
                                                 documents=documents, add_generation_prompt=add_generation_prompt,
                                                 **{**specials, **template_kwargs}):
            n += len(chunk)
            if n > MAX_CHARS:
                raise ChatTemplateError(f"chat template: the rendered prompt exceeds {MAX_CHARS} characters")
            _check_time()
            chunks.append(chunk)
        return "".join(chunks)
    except jinja2.exceptions.TemplateError as e:
        raise ChatTemplateError(f"chat template: {e}") from e
    except (RecursionError, MemoryError, OverflowError) as e:
        raise ChatTemplateError(f"chat template: {type(e).__name__}: {e}") from e
    finally:
        _deadline.reset(token)
