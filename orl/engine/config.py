"""DecodeConfig: every knob of a decode, validated up front so bad input never reaches the loop."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from orl.engine.stops import as_stops, stop_problems
from orl.model.residual import RESIDUAL_MODES

RULES = ("threshold", "topk", "factor", "entropy", "dream", "dream_origin", "sdar_static", "sdar_dynamic",
         "llada21", "fast_dllm_v2")  # orl.engine.commit
CONFIDENCES = ("prob", "sampled_prob", "margin", "neg_entropy", "random")  # what a rule ranks by (commit.rank_score)
LAYOUTS = ("prompt_block", "absolute_grid", "full_sequence")  # orl.engine.layouts, orl.engine.full_sequence
FULL_SEQUENCE_CACHES = ("none", "prefix", "dual")  # exact, then Fast-dLLM v1's approximations (full_sequence.py)


MIN_TEMPERATURE = 1e-6  # the smallest sampling temperature: logits / T stays far from float32's overflow


def decoding_problems(max_new_tokens: int, temperature: float, chunk_steps: int) -> list[str]:
    """Checks of the settings every decoder's config has (DecodeConfig, orl.engine.ar.ARConfig)."""
    problems = []
    if max_new_tokens <= 0:
        problems.append(f"max_new_tokens must be > 0, got {max_new_tokens}")
    if temperature < 0:
        problems.append(f"temperature must be >= 0, got {temperature}")
    elif 0 < temperature < MIN_TEMPERATURE:  # logits / T would overflow (T is 0 in float32): garbage, not greedy
        problems.append(f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {temperature:g}")
    if chunk_steps <= 0:
        problems.append(f"chunk_steps must be > 0, got {chunk_steps}")
    return problems


def field_problems(cfg) -> list[str]:
    """Every field of its declared type (a manifest's "block_len": "4" must be named, not fail inside a
    comparison), every float finite and every int within int64 (knobs and seeds become int64 device
    tensors): NaN compares False with every bound, so a range check alone lets it through."""
    problems = []
    for f in fields(cfg):
        v, kind = getattr(cfg, f.name), f.type if isinstance(f.type, str) else f.type.__name__
        if kind == "bool":
            ok = isinstance(v, bool)
        elif kind.startswith("tuple"):
            ok = True  # its own check names what is wrong (stop_problems)
        elif kind in ("int", "float"):
            ok = isinstance(v, int if kind == "int" else (int, float)) and not isinstance(v, bool)
        else:
            ok = kind != "str" or isinstance(v, str)
        if not ok:
            problems.append(f"{f.name} must be of type {kind}, got {v!r}")
        elif isinstance(v, float) and not math.isfinite(v):
            problems.append(f"{f.name} must be a finite number, got {v}")
        elif isinstance(v, int) and not isinstance(v, bool) and not -(1 << 63) <= v < (1 << 63):
            problems.append(f"{f.name} must fit in 64 bits, got {v}")
    return problems


class UnsupportedSetting(ValueError):
    """A valid setting this model or loop cannot run. field: the DecodeConfig field it concerns (the
    server's `param`), None when it is the kind of request (traces, step events) rather than a field."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def checked(cfg, problems: list[str]):
    """cfg, or one ValueError naming every problem."""
    if problems:
        raise ValueError(f"invalid {type(cfg).__name__}: " + "; ".join(problems))
    return cfg


@dataclass
class DecodeConfig:
    block_len: int = 16
    max_new_tokens: int = 64
    rule: str = "threshold"
    threshold: float = 0.9         # threshold rule: commit every unresolved position with p_max >= tau
    steps_per_block: int = 0       # topk rule (LLaDA schedule): 0 means one token per step
    factor: float = 1.0            # factor rule (Fast-dLLM): largest n with (n + 1)(1 - c_n) < f
    entropy_bound: float = 0.5     # entropy rule: most certain first while sum(H) - max(H) <= bound
    residual: str = "off"          # off | rcd | adapter
    residual_temperature: float = 1.0
    temperature: float = 0.0       # 0: greedy
    seed: int = 0
    chunk_steps: int = 1           # denoising steps between two host checks of "block done"
    eos_fill: bool = True          # a committed EOS resolves every later position of its block as EOS
    fused_commit: bool = True      # commit forward of block k + first step of block k + 1 in one forward
    compile: bool = False          # torch.compile the step function (CPU/GPU)
    cuda_graph: bool = False       # capture chunks of steps as CUDA graphs (GPU only)
    layout: str = "prompt_block"   # where blocks lie: prompt_block | absolute_grid | full_sequence (DESIGN 2)
    confidence: str = "prob"       # what the rules rank by: prob | sampled_prob | margin | neg_entropy | random
    cfg_scale: float = 0.0         # classifier-free guidance (LLaDA generate(); full_sequence layout only)
    full_sequence_cache: str = "none"  # none (exact) | prefix | dual: Fast-dLLM v1's approximate caches
    # llada21 rule (LLaDA2.1 generate()'s names and defaults): M2T commits conf > threshold, at least
    # num_to_transfer; T2T re-edits a committed token whose proposal differs with conf > editing_threshold;
    # after the last mask at most max_post_steps edit-only steps
    editing_threshold: float = 0.9
    max_post_steps: int = 16
    num_to_transfer: int = 1
    small_block_size: int = 8      # fast_dllm_v2 rule: sub-block length (Fast-dLLM v2 batch_sample's name)
    top_k: int = 0                 # sampling (T > 0) from the k most likely tokens only; 0: off
    top_p: float = 1.0             # sampling (T > 0) from the nucleus of mass p only (after top_k); 1: off
    # (full_sequence layout: Dream's order, top_p then top_k, and at T = 0 too: see full_sequence.py)
    alg_temp: float = 0.0          # rule 'dream': > 0 draws the positions from softmax(score / alg_temp)
    stop: tuple[str, ...] = ()     # stop strings (OpenAI's `stop`, orl.engine.stops): checked per block on the host

    def __post_init__(self):
        self.stop = as_stops(self.stop)  # one string, a list (a JSON record) or None as the tuple

    @classmethod
    def from_manifest(cls, manifest: dict, **overrides) -> "DecodeConfig":
        """The decode defaults a checkpoint was trained for (orl.json: block_len, residual_mode, layout,
        sub_block_len (Fast-dLLM v2's sub-blocks); else
        the class defaults) under explicit settings. An override of None keeps the default, so CLI flags
        that were not given pass straight through. Not validated here: the engine validates each request."""
        if unknown := set(overrides) - {f.name for f in fields(cls)}:
            raise ValueError(f"unknown decode settings {sorted(unknown)}")
        base = {"block_len": manifest.get("block_len") or cls.block_len,
                "residual": manifest.get("residual_mode") or cls.residual,
                "layout": manifest.get("layout") or cls.layout,
                "small_block_size": manifest.get("sub_block_len")}
        cfg = {**base, **{k: v for k, v in overrides.items() if v is not None}}
        if cfg["small_block_size"] is None:
            cfg["small_block_size"] = cls.default_sub_block(cfg["block_len"])
        return cls(**cfg)

    @classmethod
    def default_sub_block(cls, block_len) -> int:
        """Nothing recorded or given: the largest sub-block up to 8 (Fast-dLLM v2's 8 in its block of 32)
        that tiles the block, so a block of 4 or 12 needs no flag; a bad block_len is validate()'s to name."""
        if not isinstance(block_len, int) or block_len <= 0:
            return cls.small_block_size
        return max(d for d in range(1, min(cls.small_block_size, block_len) + 1) if block_len % d == 0)

    def validate(self) -> "DecodeConfig":
        problems = field_problems(self)
        if problems:  # NaN passes every range comparison below and a huge int would fail in a device tensor
            return checked(self, problems)
        problems = decoding_problems(self.max_new_tokens, self.temperature, self.chunk_steps) + stop_problems(self.stop)
        if self.block_len <= 0:
            problems.append(f"block_len must be > 0, got {self.block_len}")
        elif self.chunk_steps > self.block_len + max(self.max_post_steps, 0):
            # a block is done within block_len steps (+ llada21's edit-only ones); every further step of a
            # chunk is a no-op forward: --chunk-steps 10**12 ran 10**12 forwards for 4 tokens
            problems.append(f"chunk_steps must be <= block_len + max_post_steps ({self.block_len} + "
                            f"{self.max_post_steps}), got {self.chunk_steps}")
        if self.rule not in RULES:
            problems.append(f"unknown commit rule {self.rule!r}; expected one of {RULES}")
        if not 0.0 < self.threshold <= 1.0:
            problems.append(f"threshold must be in (0, 1], got {self.threshold}")
        if self.steps_per_block < 0:
            problems.append(f"steps_per_block must be >= 0, got {self.steps_per_block}")
        elif self.steps_per_block > self.block_len > 0:  # the server's rule (orl.serve.decoders) for every caller
            problems.append(f"steps_per_block ({self.steps_per_block}) must be <= block_len ({self.block_len}): a "
                            "block never takes more steps than it has positions")
        if self.factor <= 0:
            problems.append(f"factor must be > 0, got {self.factor}")
        if self.entropy_bound < 0:
            problems.append(f"entropy_bound must be >= 0, got {self.entropy_bound}")
        if self.residual not in RESIDUAL_MODES:
            problems.append(f"unknown residual mode {self.residual!r}; expected one of {RESIDUAL_MODES}")
        if self.residual_temperature <= 0:
            problems.append(f"residual_temperature must be > 0, got {self.residual_temperature}")
        if self.cfg_scale < 0 or (self.cfg_scale and self.layout != "full_sequence"):
            problems.append(f"cfg_scale must be >= 0 and needs layout 'full_sequence', got {self.cfg_scale} "
                            f"with layout {self.layout!r}")
        if self.rule == "dream_origin" and self.confidence != "random":
            problems.append(f"rule 'dream_origin' needs confidence 'random' (its uniforms), got {self.confidence!r}")
        if not 0.0 <= self.editing_threshold <= 1.0:
            problems.append(f"editing_threshold must be in [0, 1], got {self.editing_threshold}")
        if self.max_post_steps < 0:
            problems.append(f"max_post_steps must be >= 0, got {self.max_post_steps}")
        if self.num_to_transfer < 1:
            problems.append(f"num_to_transfer must be >= 1, got {self.num_to_transfer}")
        if self.rule == "fast_dllm_v2" and (self.small_block_size <= 0 or self.block_len % self.small_block_size):
            problems.append(f"rule 'fast_dllm_v2' needs small_block_size > 0 dividing block_len {self.block_len}, "
                            f"got {self.small_block_size}")
        if self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            problems.append(f"top_k must be >= 0 and top_p in (0, 1], got {self.top_k} and {self.top_p}")
        if self.alg_temp < 0 or (self.alg_temp and (self.rule != "dream" or self.layout != "full_sequence")):
            problems.append(f"alg_temp must be >= 0, and > 0 needs rule 'dream' in layout 'full_sequence' (Dream's "
                            f"diffusion_generate), got {self.alg_temp} with rule {self.rule!r}, layout {self.layout!r}")
        if self.rule in ("llada21", "fast_dllm_v2") and self.layout == "full_sequence":
            problems.append(f"rule {self.rule!r} runs in the block layouts (prompt_block, absolute_grid), "
                            "not 'full_sequence'")
        if self.full_sequence_cache not in FULL_SEQUENCE_CACHES:
            problems.append(f"unknown full_sequence_cache {self.full_sequence_cache!r}; expected one of "
                            f"{FULL_SEQUENCE_CACHES}")
        elif self.full_sequence_cache != "none" and self.layout != "full_sequence":
            problems.append(f"full_sequence_cache {self.full_sequence_cache!r} (Fast-dLLM v1's approximate cache) "
                            f"needs layout 'full_sequence', got {self.layout!r}, whose KV cache of committed "
                            "blocks is already exact")
        if self.confidence not in CONFIDENCES:
            problems.append(f"unknown confidence {self.confidence!r}; expected one of {CONFIDENCES}")
        if self.layout not in LAYOUTS:
            problems.append(f"unknown layout {self.layout!r}; expected one of {LAYOUTS}")
        return checked(self, problems)

    @property
    def n_blocks(self) -> int:
        """Blocks of an answer of max_new_tokens (the last one is partly beyond it when L does not divide it)."""
        return -(-self.max_new_tokens // self.block_len)

    @property
    def truncated(self) -> bool:
        """Sampling from a top-k / top-p truncated distribution (changes the step's code: graph key)."""
        return self.temperature > 0 and (self.top_k > 0 or self.top_p < 1)

    @property
    def draws(self) -> bool:
        """The decode reads the seed: sampled tokens, alg_temp's positions or 'random' scores."""
        return self.temperature > 0 or self.alg_temp > 0 or self.confidence == "random"

    @property
    def n_steps(self) -> int:
        """Steps of the topk schedule (LLaDA): at most one per position."""
        return self.steps_per_block or self.block_len

    def to_dict(self) -> dict:
        return asdict(self)
