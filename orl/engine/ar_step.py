"""One autoregressive decode step and its state (orl.engine.ar's ARDecoder runs it; the speculative
verify forward in orl.engine.speculative scores drafts with the same token choice, next_tokens)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from orl.engine.config import checked, decoding_problems, field_problems
from orl.engine.sampling import hash_uniform
from orl.engine.stops import as_stops, stop_problems
from orl.model.kv_cache import KVCache
from orl.model.model import Transformer


SPEC_DRAFTS = ("lookup", "diffusion", "fused")  # ARConfig.spec_draft's values
SELF_DRAFTS = ("diffusion", "fused")  # those that draft with the checkpoint itself (orl.engine.self_draft)
MAX_FUSED_TOKENS = 32  # spec_draft "fused": a round is ~2 k^2 positions, 2,113 at k = 32 (orl.engine.self_draft)


@dataclass
class ARConfig:
    max_new_tokens: int = 64
    temperature: float = 0.0   # 0: greedy
    seed: int = 0
    chunk_steps: int = 8       # decode steps between two host checks of EOS
    compile: bool = False      # torch.compile the decode step
    spec_tokens: int = 0       # prompt-lookup speculative decoding: at most this many drafted tokens per verify
                               # forward (0: off; orl.engine.speculative; batch 1, eager, same tokens)
    spec_ngram: int = 2        # the longest n-gram looked up for a draft (transformers' max_matching_ngram_size)
    spec_draft: str = "lookup" # who drafts: "lookup" (prompt lookup) | "diffusion" (a block-diffusion checkpoint's
                               # own diffusion path, orl.engine.self_draft; verified by its AR path) | "fused"
                               # (the same drafts made inside the previous verify forward: one forward a round)
    spec_groups: int = 0       # spec_draft "fused": draft groups per round, the most likely by the draft's own
                               # confidences (orl.engine.self_draft.likely_groups; 0: all 2k + 1, the longest forward)
    stop: tuple[str, ...] = () # stop strings (OpenAI's `stop`, orl.engine.stops): checked per chunk on the host

    def __post_init__(self):
        self.stop = as_stops(self.stop)

    def validate(self) -> "ARConfig":
        problems = field_problems(self) or (decoding_problems(self.max_new_tokens, self.temperature, self.chunk_steps)
                                            + stop_problems(self.stop))
        if not problems and self.spec_ngram != 2 and not self.spec_tokens:
            problems.append(f"spec_ngram ({self.spec_ngram}) is prompt-lookup speculative decoding's: set spec_tokens > 0")
        if not problems and self.spec_tokens < 0:
            problems.append(f"spec_tokens must be >= 0, got {self.spec_tokens}")
        if not problems and self.spec_ngram < 1:
            problems.append(f"spec_ngram must be >= 1, got {self.spec_ngram}")
        self_draft = self.spec_draft in SELF_DRAFTS
        if not problems and self.spec_draft not in SPEC_DRAFTS:
            problems.append(f"spec_draft must be 'lookup', 'diffusion' or 'fused', got {self.spec_draft!r}")
        if not problems and self_draft and not self.spec_tokens:
            problems.append(f"spec_draft {self.spec_draft!r} drafts spec_tokens tokens per round: set spec_tokens > 0")
        if not problems and self_draft and self.spec_ngram != 2:
            problems.append(f"spec_ngram ({self.spec_ngram}) is the prompt-lookup drafter's; spec_draft "
                            f"{self.spec_draft!r} does not look anything up")
        if not problems and self.spec_groups and self.spec_draft != "fused":
            problems.append(f"spec_groups ({self.spec_groups}) is for spec_draft 'fused' only (the groups a fused round "
                            f"drafts in), got spec_draft {self.spec_draft!r}")
        if not problems and not 0 <= self.spec_groups <= 2 * self.spec_tokens:
            problems.append(f"spec_groups must be in 0..{2 * self.spec_tokens} (0: all {2 * self.spec_tokens + 1} groups "
                            f"of a round; a number: that many, the likeliest), got {self.spec_groups}")
        if not problems and self.spec_draft == "fused" and self.spec_tokens > MAX_FUSED_TOKENS:
            problems.append(f"spec_tokens ({self.spec_tokens}) with spec_draft 'fused': at most {MAX_FUSED_TOKENS} (a "
                            "fused round holds ~2 k^2 positions; use spec_draft 'diffusion' for longer drafts)")
        if not problems and self.spec_tokens and self.compile:
            problems.append("compile: speculative decoding (spec_tokens > 0) runs its verify forwards eagerly "
                            "(their length varies with the draft)")
        return checked(self, problems)

    @property
    def draws(self) -> bool:
        """Whether the seed decides the answer (sampling), as DecodeConfig.draws."""
        return self.temperature > 0

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ARState:
    """Static buffers of one batch size."""
    cache: KVCache   # cache.length: the slot the next step's input token goes to
    pad: Tensor      # [B] left padding (RoPE position = slot - pad; slots below pad are invisible)
    token: Tensor    # [B] input of the next step
    out: Tensor      # [B, S] generated tokens, column i written by decode step i
    step: Tensor     # [] decode steps taken in this request (noise counter, output column)
    done: Tensor     # [B] bool: the row has produced EOS
    seed: Tensor     # [B] sampling seed of each row
    banned: Tensor   # [V] bool: padded vocabulary rows beyond the tokenizer, never valid outputs


def next_tokens(logits: Tensor, banned: Tensor, temperature: float, seed: Tensor, step: Tensor) -> Tensor:
    """The next token of each row of logits [N, V]: banned [V] ids never win; greedy at T = 0, else
    Gumbel-max with the noise of (seed [N], step [N]: the output index) and nothing else, so output i
    is the same token whether it is decoded alone (ar_step) or scored in a speculative verify forward
    with the draft before it (orl.engine.speculative). No host sync."""
    logits = logits.masked_fill(banned, float("-inf"))
    if temperature > 0:  # Gumbel-max: argmax(logits / T + Gumbel) is a sample of softmax(logits / T)
        noise = hash_uniform(seed, step, 1, logits.shape[-1])[:, 0]
        logits = logits / temperature - torch.log(-torch.log(noise))
    return logits.argmax(-1)


def ar_step(model: Transformer, st: ARState, temperature: float, eos_id: int, eos_ids: tuple[int, ...] = ()) -> None:
    """One decode step of every row, in place, without reading any tensor value on the host. A row
    stops at eos_id or any of eos_ids (end-of-turn tokens); a stopped row repeats eos_id."""
    slot = st.cache.length
    keys = torch.arange(st.cache.max_len, device=slot.device)
    mask = ((keys >= st.pad[:, None]) & (keys <= slot))[:, None, :]          # [B, 1, S]
    logits = model(st.token[:, None], (slot - st.pad)[:, None], mask, cache=st.cache, slots=slot.view(1))[:, 0]
    x = torch.where(st.done, eos_id, next_tokens(logits, st.banned, temperature, st.seed, st.step.expand_as(st.seed)))
    st.out.index_copy_(1, st.step.view(1), x[:, None])
    for e in sorted({eos_id, *eos_ids}):
        st.done.logical_or_(x == e)
    st.token.copy_(x)
    st.cache.length.add_(1)
    st.step.add_(1)
