"""dlmrt's canvas mode: DiffusionGemma's block diffusion over a uniform random-token canvas.

There is no mask token. Per canvas of C tokens (the manifest's block_len): the causal encoder pass
writes the prompt (then each finished canvas) into the KV cache; the canvas starts as C uniform
random tokens; each of up to N denoising steps (step n counts down N..1) runs the decoder pass over
[cache, canvas] with the previous step's logits as self-conditioning and
  logits / T(n), T(n) = t_min + (t_max - t_min) n / N              the temperature schedule
  sample every position from them (Gumbel-max), entropy H of each
  accept the k lowest-entropy positions with sum(H) - max(H) <= entropy_bound
  canvas = sample where accepted, fresh uniform tokens elsewhere     renoise
  stop the canvas when the argmax canvas equals the previous stability_threshold ones and the
  mean entropy is below confidence_threshold (a stopped row freezes while others go on).
The canvas's argmax is the block's output; a row stops at EOS (later tokens of its canvas become
pad) or at max_new_tokens (whole canvases, like transformers; token_ids are cut to max_new_tokens).
This is transformers' DiffusionGemmaGenerationMixin.generate with its defaults, reimplemented:
every random draw comes from orl's counter-based noise (orl.engine.sampling.hash_uniform) keyed by
(row seed, block, step, purpose), so a row's draws never depend on its batch; tests replay them
into transformers' generate for token parity. The host reads "all rows stopped" once per
`chunk_steps` steps (a stopped row is a no-op, so checking later changes no token) and once per canvas,
with the tokens so far that run() yields as the canvas's BlockEvent (the server streams them).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from orl.engine.config import UnsupportedSetting
from orl.engine.events import BlockEvent, DoneEvent, Event
from orl.engine.loaded import LoadedModel
from orl.engine.sampling import hash_uniform, select_tokens
from orl.engine.sequence import Generation
from orl.model.masks import see_self_if_blind

INIT, SAMPLE, RENOISE = 0, 1, 2  # the purposes of a step's draws


@dataclass(frozen=True)
class CanvasConfig:
    """transformers' DiffusionGemmaGenerationConfig defaults (generation_config.json may override)."""
    max_new_tokens: int = 256
    max_denoising_steps: int = 48
    entropy_bound: float = 0.1
    t_min: float = 0.4
    t_max: float = 0.8
    stability_threshold: int = 1
    confidence_threshold: float = 0.005
    seed: int = 0
    chunk_steps: int = 4

    @property
    def draws(self) -> bool:
        """Every canvas decode samples (DecodeConfig.draws' counterpart): the seed decides the answer."""
        return True

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def validate(self) -> "CanvasConfig":
        bad = []
        for name in ("max_new_tokens", "max_denoising_steps", "chunk_steps"):
            if getattr(self, name) <= 0:
                bad.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.entropy_bound <= 0 or self.confidence_threshold <= 0:
            bad.append("entropy_bound and confidence_threshold must be > 0")
        if not 0 <= self.t_min < self.t_max:
            bad.append(f"need 0 <= t_min < t_max, got {self.t_min}, {self.t_max}")
        if self.stability_threshold < 0:
            bad.append(f"stability_threshold must be >= 0, got {self.stability_threshold}")
        if bad:
            raise ValueError("invalid canvas decoding config: " + "; ".join(bad))
        return self

    @classmethod
    def from_generation_config(cls, gen: dict | None, **overrides) -> "CanvasConfig":
        """A checkpoint's generation_config.json (its diffusion keys), then the non-None overrides."""
        gen = gen or {}
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in gen.items() if k in known and v is not None}
        bound = (gen.get("sampler_config") or {}).get("entropy_bound")
        if bound is not None:
            values["entropy_bound"] = bound
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values).validate()


def draw_counter(block: int, step: int, purpose: int, n_steps: int) -> int:
    """One counter per (block, step, purpose): the `step` input of hash_uniform."""
    return (block * (n_steps + 1) + step) * 3 + purpose


def uniform_tokens(seed: Tensor, counter: int, length: int, vocab: int) -> Tensor:
    """seed [B] -> [B, length] tokens uniform in [0, vocab)."""
    u = hash_uniform(seed, torch.full_like(seed, counter), length, 1)[..., 0]
    return (u * vocab).long().clamp_(max=vocab - 1)


def gumbel_noise(seed: Tensor, counter: int, length: int, vocab: int) -> Tensor:
    return hash_uniform(seed, torch.full_like(seed, counter), length, vocab)


def entropy(logits: Tensor) -> Tensor:
    """[..., V] -> [...] nats, in torch.distributions.Categorical's order of operations."""
    logp = logits - logits.logsumexp(-1, keepdim=True)
    return -(logp.clamp(min=torch.finfo(logp.dtype).min) * logp.softmax(-1)).sum(-1)


def entropy_bound_accept(ent: Tensor, bound: float) -> Tensor:
    """ent [B, C] -> accepted [B, C]: the lowest-entropy positions whose entropies, less their largest,
    sum to <= bound (an upper bound on their mutual information, arXiv 2505.24857)."""
    ordered, order = torch.sort(ent, dim=-1)
    keep = ordered.cumsum(-1) - ordered <= bound
    return torch.zeros_like(keep).scatter(-1, order, keep)


def temperature(step: int, cfg: CanvasConfig, device) -> Tensor:
    """T(step) as a 0-d fp32 tensor, computed in fp32 as transformers' schedule computes it."""
    frac = torch.tensor(step, dtype=torch.int32, device=device) / cfg.max_denoising_steps
    return cfg.t_min + (cfg.t_max - cfg.t_min) * frac


class CanvasDecoder(LoadedModel):
    objective = "diffusion_gemma"

    def __init__(self, model, tokenizer, max_len: int | None = None, manifest: dict | None = None):
        super().__init__(model, tokenizer, max_len, manifest)
        if not model.args.self_conditioning:
            raise ValueError("canvas decoding needs a DiffusionGemma model (self-conditioned decoder pass)")
        self.canvas = int(self.manifest.get("block_len") or 256)
        self.eos_ids = list(self.manifest.get("eos_ids") or [tokenizer.eos_id])
        self.pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else self.eos_ids[0]

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer.encode(prompt)

    def generate(self, prompts: str | list[str], cfg: CanvasConfig | None = None,
                 seeds: list[int] | None = None) -> list[Generation]:
        prompts = [prompts] if isinstance(prompts, str) else prompts
        return self.generate_ids([self.encode(p) for p in prompts], cfg, seeds=seeds)

    def generate_ids(self, prompt_ids: list[list[int]], cfg: CanvasConfig | None = None,
                     seeds: list[int] | None = None) -> list[Generation]:
        for event in self.run(prompt_ids, cfg, seeds=seeds):
            if isinstance(event, DoneEvent):
                return event.generations
        raise AssertionError("CanvasDecoder.run ended without a DoneEvent")

    def check(self, cfg: CanvasConfig | None, trace: bool = False) -> CanvasConfig:
        """Engine.check's counterpart (the server calls it before queueing): cfg validated, no work done."""
        cfg = (cfg or CanvasConfig()).validate()
        if trace:  # the web page's step stream shows commits of masked positions; a canvas has neither
            raise UnsupportedSetting("canvas decoding (diffusion_gemma) has no step traces or step events: "
                                     "its canvas is renoised, not committed position by position")
        return cfg

    @torch.no_grad()
    def run(self, prompt_ids: list[list[int]], cfg: CanvasConfig | None = None, *, trace: bool = False,
            seeds: list[int] | None = None, step_events: bool = False) -> Iterator[Event]:
        """Engine.run's events: a BlockEvent per finished canvas (every row's tokens and text so far),
        then a DoneEvent. Closing the generator between canvases stops the decode there."""
        cfg = self.check(cfg, trace or step_events)
        if not prompt_ids or any(not p for p in prompt_ids):
            raise ValueError("every prompt needs at least one token")
        B, P, C = len(prompt_ids), max(map(len, prompt_ids)), self.canvas
        n_canvas = math.ceil(cfg.max_new_tokens / C)
        S = P + n_canvas * C
        if S > self.max_len:
            raise ValueError(f"prompt ({P}) + {n_canvas} canvases of {C} = {S} tokens, over max_len {self.max_len}")
        dev, t0 = self.device, time.perf_counter()
        seeds = seeds if seeds is not None else [cfg.seed] * B
        if len(seeds) != B:
            raise ValueError(f"{len(seeds)} seeds for {B} prompts")
        seed = torch.tensor(seeds, dtype=torch.long, device=dev)
        tokens = torch.full((B, P), self.pad_id, dtype=torch.long, device=dev)
        valid = torch.ones(B, S, dtype=torch.bool, device=dev)
        for i, p in enumerate(prompt_ids):  # left padded; positions count the padding (as transformers')
            tokens[i, P - len(p):] = torch.tensor(p, device=dev)
            valid[i, : P - len(p)] = False
        cache = self.model.new_cache(B, S)
        eos = torch.tensor(self.eos_ids, device=dev)
        finished = torch.zeros(B, dtype=torch.bool, device=dev)
        per_block = []                                           # [B] decoder passes while the row is live
        encodes = torch.zeros(B, dtype=torch.long, device=dev)   # re-encodes of finished canvases
        out, done_at, start = [], [0.0] * B, P
        new_tokens: list[list[int]] = [[] for _ in range(B)]    # host copy of each row's canvases so far
        prefill_s = 0.0
        for block in range(n_canvas):
            first, new = start - (P if block == 0 else C), tokens if block == 0 else out[-1]
            encodes += (~finished).long() * (block > 0)
            self._encode(cache, new, first, valid)
            if block == 0:
                prefill_s = time.perf_counter() - t0
            canvas, n = self._denoise(cache, seed, block, start, valid, finished, cfg)
            per_block.append(n)
            live_before = finished.clone()
            canvas, finished = self._finish(canvas, finished, start + C - P >= cfg.max_new_tokens, eos)
            out.append(canvas)
            now = time.perf_counter() - t0
            for i in torch.nonzero(finished & ~live_before).flatten().tolist():  # one read per canvas
                done_at[i] = now
            start += C
            for row, t in zip(new_tokens, canvas.tolist()):
                row += t
            steps = torch.stack(per_block, 1).tolist()
            so_far = [self._row_tokens(t, cfg)[0] for t in new_tokens]
            yield BlockEvent(block, min(C, cfg.max_new_tokens - block * C), so_far,
                             [self._text(t) for t in so_far], sum(steps[0]) + int(encodes[0]))
            if bool(finished.all()):
                break
        yield DoneEvent([self._generation(prompt_ids[i], new_tokens[i], cfg, steps[i], int(encodes[i]),
                                          prefill_s, done_at[i] or time.perf_counter() - t0) for i in range(B)])

    def _encode(self, cache, tokens: Tensor, start: int, valid: Tensor) -> None:
        """The causal pass over tokens [B, T] at slots start..start+T: writes their K/V."""
        T, S = tokens.shape[1], cache.max_len
        slots = torch.arange(start, start + T, device=tokens.device)
        k = torch.arange(S, device=tokens.device)
        # only the prompt block (start 0) has blind (padding) queries, so eye(T, S) is each one's own slot
        mask = see_self_if_blind((k[None, None, :] <= slots[None, :, None]) & valid[:, None, :])
        self.model(tokens, slots[None].expand(len(tokens), -1), mask, cache=cache, slots=slots, return_hidden=True)

    def _denoise(self, cache, seed: Tensor, block: int, start: int, valid: Tensor, finished: Tensor,
                 cfg: CanvasConfig) -> tuple[Tensor, Tensor]:
        """One canvas's denoising loop -> (argmax canvas [B, C], decoder passes per row [B])."""
        B, C, V, N = len(seed), self.canvas, self.model.args.vocab_size, cfg.max_denoising_steps
        dev = seed.device
        slots = torch.arange(start, start + C, device=dev)
        k = torch.arange(cache.max_len, device=dev)
        mask = ((k < start + C)[None, None, :] & valid[:, None, :]).expand(B, C, -1)
        pos = slots[None].expand(B, -1)
        current = uniform_tokens(seed, draw_counter(block, 0, INIT, N), C, V)
        best, logits_prev = current, None
        stopped = torch.zeros(B, dtype=torch.bool, device=dev)
        history = torch.full((cfg.stability_threshold, B, C), -1, dtype=torch.long, device=dev)
        passes = torch.zeros(B, dtype=torch.long, device=dev)
        for i, n in enumerate(range(N, 0, -1)):
            passes += (~(stopped | finished)).long()
            raw = self.model(current, pos, mask, cache=cache, slots=slots, decoder=True, self_cond=logits_prev)
            logits = raw / temperature(n, cfg, dev)
            noise = gumbel_noise(seed, draw_counter(block, i, SAMPLE, N), C, V)
            sampled = select_tokens(logits, 1.0, noise, entropy=False)[0]
            ent = entropy(logits)
            accepted = entropy_bound_accept(ent, cfg.entropy_bound)
            fresh = uniform_tokens(seed, draw_counter(block, i, RENOISE, N), C, V)
            nxt = torch.where(accepted, sampled, fresh)  # accepted samples stay, the rest is renoised
            top = logits.argmax(-1)
            hold = stopped[:, None]
            top, nxt = torch.where(hold, best, top), torch.where(hold, current, nxt)
            if logits_prev is not None:  # a stopped row keeps its last logits as its self-conditioning
                logits = torch.where(hold[..., None], logits_prev.float(), logits)
            stopped = stopped | self._should_stop(top, ent, history, cfg)
            history = torch.cat([history[1:], top[None]]) if cfg.stability_threshold else history
            current, best = nxt, top
            logits_prev = logits.to(self.model.model.embed_tokens.weight.dtype)
            if (i + 1) % cfg.chunk_steps == 0 and bool(stopped.all()):
                break
        return best, passes

    @staticmethod
    def _should_stop(top: Tensor, ent: Tensor, history: Tensor, cfg: CanvasConfig) -> Tensor:
        stable = (history == top[None]).all(-1).all(0) if cfg.stability_threshold else torch.ones_like(top[:, 0],
                                                                                                       dtype=torch.bool)
        return stable & (ent.mean(-1) < cfg.confidence_threshold)

    def _finish(self, canvas: Tensor, finished: Tensor, at_limit: bool, eos: Tensor) -> tuple[Tensor, Tensor]:
        """Rows that stopped before get a pad canvas; tokens after a row's first EOS become pad."""
        is_eos = torch.isin(canvas, eos)
        now = is_eos.any(-1) | at_limit
        canvas = torch.where(finished[:, None], self.pad_id, canvas)
        seen = is_eos.cumsum(-1)
        after = (seen > 0) & ~((seen == 1) & is_eos)
        canvas = torch.where(after & ~finished[:, None], self.pad_id, canvas)
        return canvas, finished | now

    def _row_tokens(self, new: list[int], cfg: CanvasConfig) -> tuple[list[int], bool]:
        """A row's generated tokens up to and including its first EOS, within max_new_tokens; finished."""
        new = new[: cfg.max_new_tokens]
        end = next((i for i, t in enumerate(new) if t in self.eos_ids), None)
        return (new[: end + 1], True) if end is not None else (new, False)

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens[:-1] if tokens and tokens[-1] in self.eos_ids else tokens)

    def _generation(self, prompt: list[int], new: list[int], cfg: CanvasConfig, steps: list[int], encodes: int,
                    prefill_s: float, total_s: float) -> Generation:
        tokens, finished = self._row_tokens(new, cfg)
        return Generation(prompt_ids=list(prompt), token_ids=tokens, text=self._text(tokens),
                          finished=finished, prefill_forwards=1, step_forwards=sum(steps), commit_forwards=encodes,
                          prefill_s=prefill_s, total_s=total_s, block_steps=[n for n in steps if n])
