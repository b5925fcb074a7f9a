"""A deliberately simple reference block-diffusion decoder, the oracle for tests/test_engine.py.

No KV cache, no static buffers, no batching: every denoising step recomputes the whole sequence
[prompt, committed answer blocks, current block] with a dense mask from orl.model.masks.visibility.
Token selection and the commit rules are re-implemented here in plain Python (sorted() on floats,
ties broken by the lower position first), independently of orl.engine.commit. Only the noise of
sampling reuses orl.engine.sampling.hash_uniform (the counter hash is the definition of the noise).

Semantics (DESIGN section 3): the prompt is block 0; answer blocks of `block_len` follow, the last one
shorter when max_new_tokens is not a multiple of it; each block starts as mask tokens with a cold
residual (z = 0, a = 0); each step commits >= 1 unresolved position; with eos_fill, unresolved
positions after a resolved EOS become EOS; a resolved block is appended as clean context (the
engine's commit forward, counted unless it is the last block or the row finished, or fused into the
next block's first step with cfg.fused_commit, where that step's forward is the one counted); output
stops at the first EOS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from orl.engine.sampling import hash_uniform
from orl.engine.config import DecodeConfig
from orl.model.masks import visibility
from orl.model.residual import residual_state


@dataclass
class RefStep:
    block: int
    step: int
    canvas: list[int]        # input of the step
    unresolved: list[bool]   # input of the step
    tokens: list[int]        # proposed token per position
    committed: list[bool]    # positions fixed by the rule (before eos_fill)
    z: torch.Tensor | None   # [n, D] consumed
    a: torch.Tensor | None   # [n] consumed


@dataclass
class RefResult:
    token_ids: list[int]
    finished: bool
    block_steps: list[int]
    step_forwards: int
    commit_forwards: int
    steps: list[RefStep] = field(default_factory=list)


# ---------------------------------------------------------------- commit rules, plain Python

def _by_conf(cands: list[int], conf: list[float]) -> list[int]:
    return sorted(cands, key=lambda i: (-conf[i], i))


def ref_threshold(conf: list[float], cands: list[int], tau: float) -> set[int]:
    if not cands:
        return set()
    return {i for i in cands if conf[i] >= tau} | {_by_conf(cands, conf)[0]}


def ref_topk(conf: list[float], cands: list[int], step: int, n_valid: int, n_steps: int) -> set[int]:
    k = n_valid // n_steps + (1 if step < n_valid % n_steps else 0)
    return set(_by_conf(cands, conf)[:max(k, 1)])


def ref_factor(conf: list[float], cands: list[int], f: float) -> set[int]:
    order = _by_conf(cands, conf)
    best = 1
    for n in range(1, len(order) + 1):  # the largest n with (n + 1) * (1 - c_n) < f
        if (n + 1) * (1.0 - conf[order[n - 1]]) < f:
            best = n
    return set(order[:best])


def ref_entropy(ent: list[float], cands: list[int], bound: float) -> set[int]:
    order = sorted(cands, key=lambda i: (ent[i], i))
    best = 1
    for m in range(1, len(order) + 1):  # most certain first while sum(H) - max(H) <= bound
        hs = [ent[i] for i in order[:m]]
        if sum(hs) - max(hs) <= bound:
            best = m
    return set(order[:best])


def ref_commit(cfg: DecodeConfig, conf, ent, cands, step, n_valid) -> set[int]:
    if not cands:
        return set()
    if cfg.rule == "threshold":
        return ref_threshold(conf, cands, cfg.threshold)
    if cfg.rule == "topk":
        return ref_topk(conf, cands, step, n_valid, cfg.steps_per_block or cfg.block_len)
    if cfg.rule == "factor":
        return ref_factor(conf, cands, cfg.factor)
    if cfg.rule == "entropy":
        return ref_entropy(ent, cands, cfg.entropy_bound)
    raise ValueError(cfg.rule)


# ---------------------------------------------------------------- token selection, plain Python

def _argmax(values: list[float]) -> int:
    best = 0
    for t in range(1, len(values)):
        if values[t] > values[best]:
            best = t
    return best


def select(row: list[float], banned: set[int], temperature: float, noise: list[float] | None):
    """One position's logits -> (token, p(token), entropy in nats), in double precision."""
    logits = [(-math.inf if t in banned else v) for t, v in enumerate(row)]
    m = max(logits)
    ex = [math.exp(v - m) if v != -math.inf else 0.0 for v in logits]
    s = sum(ex)
    p = [e / s for e in ex]
    if temperature == 0.0 or noise is None:
        x = _argmax(logits)
    else:
        x = _argmax([(v / temperature - math.log(-math.log(u))) if v != -math.inf else -math.inf
                     for v, u in zip(logits, noise)])
    ent = -sum(q * math.log(q) for q in p if q > 0)
    return x, p[x], ent


# ---------------------------------------------------------------- the decoder

@torch.no_grad()
def reference_generate(model, prompt: list[int], cfg: DecodeConfig, *, mask_id: int, eos_id: int, pad_id: int,
                       seed: int | None = None, tokenizer_vocab: int | None = None) -> RefResult:
    """tokenizer_vocab: ids at or above it (a model vocabulary padded beyond the tokenizer's) are never
    generated, like mask and pad (pad unless it doubles as EOS)."""
    cfg = cfg.validate()
    model.eval()
    L = cfg.block_len
    banned = {mask_id} if pad_id == eos_id else {mask_id, pad_id}
    if tokenizer_vocab is not None:
        banned |= set(range(tokenizer_vocab, model.args.vocab_size))
    E = model.model.embed_tokens.weight
    D = E.shape[1]
    seed = cfg.seed if seed is None else seed
    n_blocks = -(-cfg.max_new_tokens // L)
    committed: list[int] = []        # clean answer tokens of resolved blocks (full blocks)
    out: list[int] = []
    finished = False
    block_steps: list[int] = []
    commits = 0
    global_step = 0
    records: list[RefStep] = []
    for j in range(n_blocks):
        n = min(L, cfg.max_new_tokens - j * L)
        canvas = [mask_id] * n
        unresolved = [True] * n
        z = torch.zeros(n, D, dtype=E.dtype)
        a = torch.zeros(n, dtype=E.dtype)
        step = 0
        while any(unresolved):
            seq = prompt + committed + canvas
            T = len(seq)
            blocks, states = [0] * len(prompt), [0] * len(prompt)
            for i in range(len(committed)):
                blocks.append(1 + i // L)
                states.append(0)
            blocks += [1 + j] * n
            states += [1] * n
            bt, stt = torch.tensor(blocks), torch.tensor(states)
            mask = visibility(bt, stt, bt, stt)  # [T, T] dense, no cache
            ctx = T - n
            zf = torch.cat([torch.zeros(ctx, D, dtype=E.dtype), z])[None]
            af = torch.cat([torch.zeros(ctx, dtype=E.dtype), a])[None]
            uf = torch.tensor([False] * ctx + unresolved)[None]
            # a shifted model reads each token off the position before it: t - 1 in this contiguous sequence
            logits = model(torch.tensor([seq]), torch.arange(T)[None], mask[None], mask_id=mask_id,
                           z=zf, a=af, unresolved=uf, residual=cfg.residual,
                           read_from=torch.arange(-1, T - 1).clamp(min=0))[0, ctx:].float()  # [n, V]
            V = logits.shape[-1]
            noise = None
            if cfg.temperature > 0:
                noise = hash_uniform(torch.tensor([seed]), torch.tensor([global_step]), L, V)[0].double().tolist()
            rows = logits.double().tolist()
            xs, conf, ent = [], [], []
            for i in range(n):
                x, c, h = select(rows[i], banned, cfg.temperature, noise[i] if noise else None)
                xs.append(x)
                conf.append(c)
                ent.append(h)
            cands = [i for i in range(n) if unresolved[i]]
            commit = ref_commit(cfg, conf, ent, cands, step, n)
            records.append(RefStep(j, step, list(canvas), list(unresolved), xs, [i in commit for i in range(n)],
                                   z.clone() if cfg.residual != "off" else None,
                                   a.clone() if cfg.residual != "off" else None))
            for i in commit:
                canvas[i] = xs[i]
                unresolved[i] = False
            if cfg.eos_fill:
                seen = False
                for i in range(n):
                    if seen and unresolved[i]:
                        canvas[i] = eos_id
                        unresolved[i] = False
                    if canvas[i] == eos_id and not unresolved[i]:
                        seen = True
            if cfg.residual != "off":
                lb = logits.clone()
                lb[:, sorted(banned)] = -math.inf
                zz, aa = residual_state(lb[None], E, cfg.residual_temperature)
                z, a = zz[0], aa[0]
            step += 1
            global_step += 1
        block_steps.append(step)
        toks = list(canvas)
        if eos_id in toks:
            toks = toks[: toks.index(eos_id) + 1]
            finished = True
        out.extend(toks)
        if finished or j == n_blocks - 1:
            break
        committed.extend(canvas)  # the commit forward: the block becomes clean context
        commits += not cfg.fused_commit
    return RefResult(out, finished, block_steps, sum(block_steps), commits, records)


# ---------------------------------------------------------------- tiny random models for the engine tests

def random_model(seed: int = 0, *, vocab_size: int, adapter_std: float = 0.1, head_std: float = 1.0,
                 eos_bias: float | None = None, eos_id: int = 1, **kw):
    """A tiny fp32 model with its own init (independent of Transformer's default init): unit-variance
    embeddings, 1/sqrt(fan_in) linears, an untied head whose scale spreads the confidences (so blocks
    take several steps), and a non-zero adapter down projection (so adapter mode differs from off;
    0.1 keeps the random adapter from amplifying float noise step after step). eos_bias adds a bias to
    the EOS logit (positive: the model stops early; very negative: it never stops)."""
    from torch import nn

    from orl.model import ModelArgs, Transformer

    args = dict(vocab_size=vocab_size, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, ffn_dim=64,
                max_seq_len=128, adapter_dim=16, tie_embeddings=False, learned_pos=True)
    args.update(kw)
    torch.manual_seed(seed)
    m = Transformer(ModelArgs(**args))
    with torch.no_grad():
        for name, mod in m.named_modules():
            if isinstance(mod, nn.Embedding):
                nn.init.normal_(mod.weight, std=1.0)
            elif isinstance(mod, nn.Linear):
                nn.init.normal_(mod.weight, std=mod.in_features ** -0.5)
        if not m.args.tie_embeddings:
            nn.init.normal_(m.lm_head.weight, std=head_std)
        if m.model.residual_adapter is not None:
            nn.init.normal_(m.model.residual_adapter.down_proj.weight, std=adapter_std)
        if eos_bias is not None:
            head = nn.Linear(m.args.dim, m.args.vocab_size, bias=True)
            head.weight.copy_(m.lm_head.weight)
            head.bias.zero_()
            head.bias[eos_id] = eos_bias
            m.lm_head = head
    return m.eval()
