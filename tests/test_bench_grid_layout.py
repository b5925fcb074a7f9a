"""`orl bench` (d), the prefix-cache loop, runs "the same threshold rule as (a)" on the same base: on a base that
decodes on the absolute grid (the shipped tiny7 models) it must decode on that grid too, or its tokens, accuracy
and TPF are those of another decoder (4 of 20 prompts agreed with (a) on orl-tiny7-base). (c), LLaDA's reference
schedule over prompt blocks, has no grid form: it is left out, saying why, instead of showing wrong numbers."""
import pytest

from orl.engine import DecodeConfig, Engine
from orl.eval.bench import BenchSpec, build_systems
from orl.eval.peers import prefix_cache
from orl.tokenizer import CharTokenizer
from reference_decoder import random_model

TOK = CharTokenizer()
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "shifted"])
def engine(request):
    return Engine(random_model(vocab_size=TOK.vocab_size, adapter_dim=0, eos_bias=3.0, shift_logits=request.param),
                  TOK)


@pytest.mark.parametrize("prompt", ["a", "hel", "hello", "sort:3,1,2=", "abcdefgh"])  # tails 1, 3, 1, 3, 0 of L 4
def test_prefix_cache_on_the_absolute_grid_equals_the_engine(engine, prompt):
    cfg = DecodeConfig(block_len=4, max_new_tokens=10, threshold=0.3, eos_fill=False, layout="absolute_grid")
    g = engine.generate(prompt, cfg)[0]
    b = prefix_cache(engine.model, TOK.encode(prompt), gen_len=10, block_len=4, threshold=0.3, mask_id=TOK.mask_id,
                     eos_id=TOK.eos_id, banned=engine.ids.banned, layout="absolute_grid")
    assert b.token_ids == g.token_ids
    # one refresh forward between blocks (the first one is the prefill, not counted)
    assert b.forwards == g.step_forwards + len(g.block_steps) - 1


def test_bench_decodes_the_prefix_cache_loop_in_the_bases_layout():
    systems, engine, cfg = build_systems(BenchSpec(base="checkpoints/orl-tiny7-base", limit=1, ar_spec_tokens=0))
    assert cfg.layout == "absolute_grid"
    assert isinstance(systems["c"], str) and "absolute_grid" in systems["c"]
    for prompt in ["cumsum:v1w6x2y5z6A2B3C7D6E4F9G5H6I1J1=v", "echo h=8;i=h-0;j=i+8:h", "ksort:e2,l5,k5,j2,d4,g5="]:
        assert systems["d"](prompt).token_ids == systems["a"](prompt).token_ids
