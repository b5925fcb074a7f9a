"""Full-sequence decoding (LLaDA, Dream; orl.engine.full_sequence): one bidirectional window over prompt +
the whole answer canvas, future masks included, semi-autoregressive windows restricting commits. The
engine must give the tokens of LLaDA's published generate() (low_confidence remasking, the per-block
transfer schedule get_num_transfer_tokens), written here from the published loop, and with a shifted
read-out Dream's (logits of position i from position i - 1)."""
import pytest
import torch

from orl.engine import DecodeConfig, Engine
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

pytestmark = pytest.mark.usefixtures("one_thread")
TOK = CharTokenizer()
GEN, BLOCK, STEPS = 10, 4, 3


def llada_generate(model, prompt: list[int], banned: list[int]) -> list[int]:
    """LLaDA generate(): x = prompt + masks; per block, STEPS steps over the whole sequence, each fixing
    the num_transfer_tokens most confident masked positions of the block (greedy, no CFG)."""
    P = len(prompt)
    x = list(prompt) + [TOK.mask_id] * GEN
    for b in range(-(-GEN // BLOCK)):
        s, e = P + b * BLOCK, min(P + (b + 1) * BLOCK, P + GEN)
        n = e - s
        schedule = [n // STEPS + (1 if i < n % STEPS else 0) for i in range(STEPS)]
        for i in range(STEPS):
            masked = [k for k in range(s, e) if x[k] == TOK.mask_id]
            if not masked:
                break
            T = len(x)
            with torch.no_grad():
                h = model(torch.tensor([x]), torch.arange(T)[None], torch.ones(1, T, T, dtype=torch.bool),
                          return_hidden=True)
                logits = model.read_out(h, read_from=(torch.arange(T) - 1).clamp(min=0))[0]
            logits[:, banned] = float("-inf")
            conf, x0 = logits.softmax(-1).max(-1)
            for k in sorted(masked, key=lambda k: (-conf[k].item(), k))[: max(schedule[i], 1)]:
                x[k] = int(x0[k])
    answer = x[P:]
    return answer[: answer.index(TOK.eos_id) + 1] if TOK.eos_id in answer else answer


PROMPTS = ["hi", "hello world", "x = 1"]


@pytest.mark.parametrize("shift", [False, True], ids=["llada", "dream"])
def test_full_sequence_equals_published_generate(shift):
    model = random_model(5, vocab_size=TOK.vocab_size, eos_bias=-1.0, adapter_dim=0, learned_pos=False,
                         shift_logits=shift)
    engine = Engine(model, TOK)
    cfg = DecodeConfig(block_len=BLOCK, max_new_tokens=GEN, rule="topk", steps_per_block=STEPS,
                       layout="full_sequence", eos_fill=False)
    want = [llada_generate(model, TOK.encode(p), list(engine.ids.banned)) for p in PROMPTS]
    got = [g.token_ids for g in engine.generate(PROMPTS, cfg)]  # one batch, left padded
    assert got == want
    assert [engine.generate([p], cfg)[0].token_ids for p in PROMPTS[:1]] == want[:1]
    assert max(len(w) for w in want) > BLOCK


def test_refused_options_are_named():
    engine = Engine(random_model(5, vocab_size=TOK.vocab_size), TOK)
    cfg = DecodeConfig(block_len=BLOCK, max_new_tokens=GEN, layout="full_sequence", residual="rcd")
    with pytest.raises(ValueError, match="full-sequence layout does not support: residual='rcd'"):
        engine.generate(["hi"], cfg)
