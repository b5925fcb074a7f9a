"""Typed configuration of the native block-diffusion transformer (DESIGN section 2)."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

HIDDEN_ACTS = ("silu", "gelu_tanh")
LAYER_TYPES = ("full_attention", "sliding_attention")
ROUTERS = ("softmax", "sigmoid", "gemma4")


@dataclass(frozen=True)
class ModelArgs:
    vocab_size: int = 64
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 32
    ffn_dim: int = 384
    norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rotary_fraction: float = 1.0  # partial rotary: only the first fraction of each head is rotated
    qk_norm: bool = True
    qkv_bias: bool = False  # biases on the q/k/v projections (Qwen2 bodies: Dream, Fast-dLLM v2)
    tie_embeddings: bool = True
    max_seq_len: int = 512
    # tiny models learn positional tasks much faster with an absolute position table on top of RoPE
    learned_pos: bool = False
    # Scalable softmax (SSMax, Nakanishi 2025): each head's attention logits times s_h * ln(n), n the keys the
    # query sees and s_h learned, so attention does not flatten as contexts grow past the trained lengths
    attn_logn: bool = False
    # Shifted read-out (Dream): the logits for token i come from the hidden state at position i - 1, as
    # in the AR model a base is converted from, so the conversion keeps the next-token skill where the
    # AR stage put it. The first token of a block is then read off the last clean position before it.
    shift_logits: bool = False
    # MoE: n_experts == 0 means a dense SwiGLU in every layer
    n_experts: int = 0
    n_experts_per_tok: int = 2
    moe_ffn_dim: int = 0
    shared_expert_ffn_dim: int = 0  # 0: no shared expert
    norm_topk_prob: bool = True
    moe_every: int = 1  # layer i is MoE when (i + 1) % moe_every == 0 (Qwen3-MoE decoder_sparse_step)
    first_dense_layers: int = 0  # layers i < this are dense whatever moe_every says (LLaDA2 first_k_dense_replace)
    # router (orl.model.moe.Router): "softmax" (Qwen3-MoE) or "sigmoid" (LLaDA2: DeepSeek-V3 style scores,
    # an expert_bias buffer that shifts the choice but not the weights, group-limited top-k, scaled weights)
    router: str = "softmax"
    router_bias: bool = False
    n_group: int = 1
    topk_group: int = 1
    routed_scaling: float = 1.0
    # residual adapter g_phi (ORL adapter mode); 0 means the model has no adapter weights
    adapter_dim: int = 0
    adapter_alpha: float = 1.0
    # Gemma 3 switches (all off = Qwen3). Gemma's RMSNorm scales by (1 + w) with w stored zero-centred
    norm_unit_offset: bool = False
    sandwich_norm: bool = False        # extra norms on the attention and MLP outputs (Gemma 2/3)
    scale_embeddings: bool = False     # token embeddings times sqrt(dim), rounded to the embedding dtype
    hidden_act: str = "silu"           # gated MLP activation: "silu" or "gelu_tanh"
    query_pre_attn_scalar: float | None = None  # attention scale query_pre_attn_scalar**-0.5 (None: head_dim)
    final_logit_softcap: float | None = None    # logits = cap * tanh(logits / cap)
    rope_scaling_factor: float = 1.0   # linear RoPE scaling of the full-attention layers (positions / factor)
    # local layers: layer_types[i] == "sliding_attention" sees keys at positions > q - sliding_window
    # and rotates with rope_local_theta; None means every layer is full attention
    layer_types: list[str] | None = None
    sliding_window: int = 0
    rope_local_theta: float | None = None
    # Gemma 4 / DiffusionGemma switches (all off = the above). Full-attention ("global") layers may have
    # their own head_dim and KV-head count, no v_proj (the raw keys are the values) and "proportional"
    # partial RoPE: the first global_rope_proportion of each head's frequency pairs rotate, with the
    # exponent over the whole head_dim, the rest have frequency 0 (transformers' rope_type "proportional")
    global_head_dim: int = 0           # 0: head_dim
    global_n_kv_heads: int = 0         # 0: n_kv_heads
    global_k_eq_v: bool = False
    global_rope_proportion: float = 0.0  # 0: global layers use rotary_fraction like the others
    v_norm: bool = False               # a scale-free RMSNorm on the values
    norm_scale_fp32: bool = False      # plain RMSNorm takes the product with its weight in fp32 (Gemma 4)
    layer_scalar: bool = False         # a [1] buffer multiplying each layer's output
    # every layer runs the dense MLP and the routed MoE side by side, each with its own pre/post norm,
    # then a shared post-norm (Gemma 4 "enable_moe_block"); the router is then "gemma4"
    parallel_moe: bool = False
    # the diffusion decoder's gated MLP on the previous step's soft embeddings (DiffusionGemma)
    self_conditioning: bool = False

    def __post_init__(self) -> None:
        _check_types(self)  # a config file's "2.5" layers or "x" eps: named here, not a TypeError in a forward
        problems = []
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_dim", "max_seq_len",
                     "moe_every"):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.n_kv_heads > 0 and self.n_heads % self.n_kv_heads:
            problems.append(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if not 0.0 < self.rotary_fraction <= 1.0:
            problems.append(f"rotary_fraction must be in (0, 1], got {self.rotary_fraction}")
        if self.rotary_dim % 2:
            problems.append(f"rotary dim {self.rotary_dim} (head_dim * rotary_fraction) must be even")
        if self.n_experts and not 0 < self.n_experts_per_tok <= self.n_experts:
            problems.append(f"n_experts_per_tok must be in [1, n_experts], got {self.n_experts_per_tok}")
        if self.n_experts and self.moe_ffn_dim <= 0:
            problems.append("moe_ffn_dim must be > 0 when n_experts > 0")
        if self.router not in ROUTERS:
            problems.append(f"router must be one of {ROUTERS}, got {self.router!r}")
        if self.n_experts and (self.n_group <= 0 or self.n_experts % self.n_group
                               or not 0 < self.topk_group <= self.n_group):
            problems.append(f"n_group ({self.n_group}) must divide n_experts ({self.n_experts}) and "
                            f"topk_group ({self.topk_group}) be in [1, n_group]")
        elif self.n_experts and self.n_group > 1 and (self.n_experts // self.n_group < 2 or self.n_experts_per_tok
                                                      > self.topk_group * self.n_experts // self.n_group):
            problems.append(f"groups need >= 2 experts (a group scores by its best two) and topk_group "
                            f"({self.topk_group}) groups >= n_experts_per_tok ({self.n_experts_per_tok}) experts")
        if self.hidden_act not in HIDDEN_ACTS:
            problems.append(f"hidden_act must be one of {HIDDEN_ACTS}, got {self.hidden_act!r}")
        if self.layer_types is not None:
            if len(self.layer_types) != self.n_layers:
                problems.append(f"layer_types has {len(self.layer_types)} entries for {self.n_layers} layers")
            if bad := sorted(set(self.layer_types) - set(LAYER_TYPES)):
                problems.append(f"layer_types entries must be in {LAYER_TYPES}, got {bad}")
            if "sliding_attention" in self.layer_types and self.sliding_window <= 0:
                problems.append("sliding_attention layers need sliding_window > 0")
        for name in ("global_head_dim", "global_n_kv_heads"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.global_n_kv_heads > 0 and self.n_heads % self.global_n_kv_heads:
            problems.append(f"n_heads ({self.n_heads}) must be a multiple of global_n_kv_heads "
                            f"({self.global_n_kv_heads})")
        if not 0.0 <= self.global_rope_proportion <= 1.0:
            problems.append(f"global_rope_proportion must be in [0, 1], got {self.global_rope_proportion}")
        if self.parallel_moe and not self.n_experts:
            problems.append("parallel_moe needs n_experts > 0")
        if self.rope_scaling_factor <= 0:
            problems.append(f"rope_scaling_factor must be > 0, got {self.rope_scaling_factor}")
        # a theta <= 0 gives NaN frequencies and a model that decodes garbage without an error
        for name in ("rope_theta", "rope_local_theta", "query_pre_attn_scalar", "final_logit_softcap"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if self.norm_eps < 0:
            problems.append(f"norm_eps must be >= 0, got {self.norm_eps}")
        if problems:
            raise ValueError("invalid ModelArgs: " + "; ".join(problems))

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.rotary_fraction)

    def layer_head_dim(self, i: int) -> int:
        return self.global_head_dim if self.global_head_dim and not self.is_sliding(i) else self.head_dim

    def layer_kv_heads(self, i: int) -> int:
        return self.global_n_kv_heads if self.global_n_kv_heads and not self.is_sliding(i) else self.n_kv_heads

    def k_eq_v(self, i: int) -> bool:
        return self.global_k_eq_v and not self.is_sliding(i)

    def is_sliding(self, i: int) -> bool:
        return self.layer_types is not None and self.layer_types[i] == "sliding_attention"

    def is_moe_layer(self, i: int) -> bool:
        return self.n_experts > 0 and i >= self.first_dense_layers and (i + 1) % self.moe_every == 0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelArgs":
        if not isinstance(d, dict):
            raise ValueError(f"model_args must be an object of ModelArgs fields, got a {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown ModelArgs field(s): {', '.join(unknown)}")
        return cls(**d)


def _check_types(args: ModelArgs) -> None:
    """Every field against its annotation (config files are JSON: any type can arrive): ints are ints
    (not bools, not 2.5), floats finite numbers, bools bools, strings strings."""
    problems = []
    for f in fields(args):
        v, kind = getattr(args, f.name), f.type
        if v is None and kind.endswith("| None"):
            continue
        base = kind.removesuffix(" | None")
        ok = {"int": isinstance(v, int) and not isinstance(v, bool),
              "float": isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v),
              "bool": isinstance(v, bool), "str": isinstance(v, str),
              "list[str]": isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v)}[base]
        if not ok:
            want = {"int": "an integer", "float": "a finite number", "bool": "true or false", "str": "a string",
                    "list[str]": "a list of strings"}[base]
            problems.append(f"{f.name} must be {want}{' or null' if base != kind else ''}, got {v!r}")
    if problems:
        raise ValueError("invalid ModelArgs: " + "; ".join(problems))
