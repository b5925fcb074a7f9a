"""transformers classes around orl's own model, shipped inside an export as modeling_orl.py.

`orl export` bundles orl/model/{args,kv_cache,masks,residual,model}.py and this file into one module
(orl/export_bundle.py), so `AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)` runs
exactly orl's forward: equal logits by construction, with learned positions, the shifted read-out and
the residual adapter kept. The parameter names are orl's (= Qwen3's), so the weights load as saved.

Without `orl_mask` the forward is causal (what `generate` expects). Block-diffusion visibility comes in
as `orl_mask` [B, T, T] bool (True = may attend), e.g. `block_causal(prompt_len, answer_len, block_len)`
from the same module; the shifted read-out then reads each position's logits off the state before it,
as orl's engine does.
"""
from __future__ import annotations

import torch
from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutput

from orl.model.args import ModelArgs
from orl.model.model import Backbone, Transformer

MODEL_TYPE = "orl_dllm"


class OrlConfig(PretrainedConfig):
    model_type = MODEL_TYPE

    def __init__(self, orl_args: dict | None = None, block_len: int | None = None, mask_token_id: int | None = None,
                 **kwargs):
        self.orl_args = dict(orl_args or {})
        self.block_len, self.mask_token_id = block_len, mask_token_id
        kwargs.setdefault("tie_word_embeddings", bool(self.orl_args.get("tie_embeddings", False)))
        super().__init__(**kwargs)


class OrlForCausalLM(PreTrainedModel, GenerationMixin):  # transformers >= 4.50: generate only with the mixin
    config_class = OrlConfig
    base_model_prefix = "model"
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: OrlConfig):
        super().__init__(config)
        self.args = ModelArgs(**config.orl_args)
        self.model = Backbone(self.args)
        self.lm_head = torch.nn.Linear(self.args.dim, self.args.vocab_size, bias=False)
        self.post_init()

    # orl's own methods, unchanged: they use only self.args, self.model and self.lm_head
    embed = Transformer.embed
    read_out = Transformer.read_out
    softcap = Transformer.softcap  # read_out calls it
    orl_forward = Transformer.forward

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def get_output_embeddings(self):
        return self.lm_head

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                                      **kwargs) -> dict:
        # no KV cache here (orl's cache is its engine's): each generate step reruns the whole sequence; positions
        # count real tokens only, so a left-padded row sees the positions it would see alone (learned tables care)
        position_ids = None if attention_mask is None else (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, orl_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, **kwargs) -> CausalLMOutput:
        B, T = input_ids.shape
        pos = position_ids if position_ids is not None else torch.arange(T, device=input_ids.device).expand(B, T)
        if orl_mask is None:  # causal, with left padding masked out like transformers does
            orl_mask = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril().expand(B, T, T)
            if attention_mask is not None:
                orl_mask = orl_mask & attention_mask.bool()[:, None, :]
                orl_mask = orl_mask | torch.eye(T, dtype=torch.bool, device=input_ids.device)  # no empty rows
            logits = self.orl_forward(input_ids, pos, orl_mask)
        else:  # diffusion use: the token AT each position, read off the state before it when shifted
            read_from = (torch.arange(T, device=input_ids.device) - 1).clamp(min=0)
            logits = self.orl_forward(input_ids, pos, orl_mask, read_from=read_from)
        return CausalLMOutput(logits=logits)

