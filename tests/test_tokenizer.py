"""Tokenizers: the char tokenizer of the tiny tasks and the tokenizer.json wrapper share one interface
(encode, decode, special ids, chat template, save/load)."""
import json

import pytest

from orl.tokenizer import PRINTABLE, CharTokenizer, HFTokenizer, TokenizerError, load_tokenizer

# ---------------------------------------------------------------- CharTokenizer


def test_char_round_trip_covers_every_printable_character():
    tok = CharTokenizer()
    ids = tok.encode(PRINTABLE)
    assert len(ids) == len(PRINTABLE) and len(set(ids)) == len(ids)
    assert tok.decode(ids) == PRINTABLE
    assert tok.vocab_size == 3 + len(PRINTABLE)


def test_char_special_ids():
    tok = CharTokenizer()
    assert (tok.pad_id, tok.eos_id, tok.mask_id) == (0, 1, 2)
    assert min(tok.encode(PRINTABLE)) == 3
    ids = tok.encode("ab") + [tok.mask_id, tok.eos_id, tok.pad_id]
    assert tok.decode(ids) == "ab"
    assert tok.decode(ids, skip_special=False) == "ab<mask><eos><pad>"


def test_char_unknown_character_is_named():
    with pytest.raises(TokenizerError, match=r"character 'é' at position 1"):
        CharTokenizer().encode("héllo")
    with pytest.raises(TokenizerError, match="token id 500 out of range"):
        CharTokenizer().decode([500])


def test_char_save_load(tmp_path):
    tok = CharTokenizer("0123456789+=")
    tok.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, CharTokenizer) and loaded.chars == tok.chars
    assert loaded.encode("12+3=15") == tok.encode("12+3=15") and loaded.vocab_size == 15
    with pytest.raises(TokenizerError, match="'a'"):
        loaded.encode("a")


def test_char_rejects_foreign_file(tmp_path):
    (tmp_path / "orl_tokenizer.json").write_text(json.dumps({"type": "bpe"}))
    with pytest.raises(TokenizerError, match="not an orl char tokenizer"):
        load_tokenizer(tmp_path)


def test_no_tokenizer_is_named(tmp_path):
    with pytest.raises(TokenizerError, match=f"no tokenizer in {tmp_path}"):
        load_tokenizer(tmp_path)


# ---------------------------------------------------------------- HFTokenizer

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIAL = ["<|endoftext|>", "<|pad|>", "<|mask|>", "<|im_start|>", "<|im_end|>"]


def write_hf_tokenizer(d, *, pad: bool = True, mask: bool = True, template: bool = True) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["def add(a, b):\n    return a + b", "hello world, hello diffusion"] * 10, trainer)
    tok.save(str(d / "tokenizer.json"))
    cfg = {"eos_token": "<|endoftext|>"}
    if pad:
        cfg["pad_token"] = {"content": "<|pad|>", "special": True}  # the dict form some configs use
    if mask:
        cfg["mask_token"] = "<|mask|>"
    if template:
        cfg["chat_template"] = TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))


def test_hf_encode_decode_and_special_ids(tmp_path):
    write_hf_tokenizer(tmp_path)
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, HFTokenizer)
    assert (tok.eos_id, tok.pad_id, tok.mask_id) == (0, 1, 2)  # specials come first in training order
    text = "def add(x, y):\n    return x + y  # héllo"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode())  # merges were learned, so this is not byte-per-token
    assert tok.decode(ids + [tok.eos_id, tok.mask_id]) == text
    assert "<|mask|>" in tok.decode([tok.mask_id], skip_special=False)
    assert tok.token_str(tok.eos_id) == "<|endoftext|>"


def test_hf_missing_pad_falls_back_to_eos_and_mask_can_be_named(tmp_path):
    write_hf_tokenizer(tmp_path, pad=False, mask=False)
    tok = load_tokenizer(tmp_path)
    assert tok.pad_id == tok.eos_id == 0 and tok.mask_id is None
    assert load_tokenizer(tmp_path, mask_token="<|mask|>").mask_id == 2


def test_hf_chat_template(tmp_path):
    write_hf_tokenizer(tmp_path)
    tok = load_tokenizer(tmp_path)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    want = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(messages) == want


def test_hf_chat_template_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    write_hf_tokenizer(tmp_path)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "add 2 and 3"}]
    ref = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"), chat_template=TEMPLATE)
    want = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert load_tokenizer(tmp_path).apply_chat_template(messages) == want


def test_hf_without_chat_template_is_named(tmp_path):
    write_hf_tokenizer(tmp_path, template=False)
    with pytest.raises(TokenizerError, match="no chat_template"):
        load_tokenizer(tmp_path).apply_chat_template([{"role": "user", "content": "hi"}])


def test_hf_save_load(tmp_path):
    write_hf_tokenizer(tmp_path)
    tok = load_tokenizer(tmp_path)
    out = tmp_path / "copy"
    out.mkdir()
    tok.save(out)
    again = load_tokenizer(out)
    text = "hello world"
    assert again.encode(text) == tok.encode(text)
    assert (again.eos_id, again.pad_id, again.mask_id) == (tok.eos_id, tok.pad_id, tok.mask_id)
    assert again.apply_chat_template([{"role": "user", "content": "x"}]) == tok.apply_chat_template(
        [{"role": "user", "content": "x"}])


def test_hf_save_keeps_a_chat_template_jinja(tmp_path):
    """transformers 5 writes the template to chat_template.jinja only; a checkpoint saved from such a base
    (orl train --recipe convert) lost it, and every chat prompt of the result was refused."""
    write_hf_tokenizer(tmp_path, template=False)
    (tmp_path / "chat_template.jinja").write_text(TEMPLATE)
    out = tmp_path / "copy"
    out.mkdir()
    load_tokenizer(tmp_path).save(out)
    assert (out / "chat_template.jinja").read_text() == TEMPLATE
    assert load_tokenizer(out).apply_chat_template([{"role": "user", "content": "x"}]) == \
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"


def test_hf_corrupt_tokenizer_json_is_named(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="tokenizer.json"):
        load_tokenizer(tmp_path)
