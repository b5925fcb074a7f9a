"""A DiffusionGemma checkpoint's decoding defaults, shared by `orl generate`, `orl eval` and `orl serve`:
generation_config.json (its diffusion keys and EOS ids, as transformers' generate() reads them), then
transformers' defaults (CanvasConfig)."""
from __future__ import annotations

from pathlib import Path

from orl.checkpoint_checks import read_json
from orl.engine.canvas import CanvasConfig, CanvasDecoder
from orl.model.families.common import token_ids


def generation_config(directory) -> dict:
    """The checkpoint's generation_config.json (transformers writes one beside config.json), or {}."""
    path = Path(directory) / "generation_config.json"
    return read_json(path) if path.is_file() else {}


def canvas_decoder(directory, model, tokenizer, manifest: dict, **overrides) -> tuple[CanvasDecoder, CanvasConfig]:
    """The decoder (stopping at generation_config.json's EOS ids, where transformers' generate() stops)
    and its default config with the non-None overrides applied and validated."""
    gen = generation_config(directory)
    cfg = CanvasConfig.from_generation_config(gen, **overrides)
    try:
        eos = token_ids(gen.get("eos_token_id"))
    except ValueError as e:
        raise ValueError(f"{Path(directory) / 'generation_config.json'}: {e}") from None
    if eos:
        manifest = {**manifest, "eos_ids": eos}
    return CanvasDecoder(model, tokenizer, manifest=manifest), cfg


# the decode settings (DecodeConfig names, the `orl generate` / `orl eval` flags) canvas decoding has, and
# their CanvasConfig names
CANVAS_SETTINGS = {"max_new_tokens": "max_new_tokens", "steps_per_block": "max_denoising_steps",
                   "entropy_bound": "entropy_bound", "chunk_steps": "chunk_steps"}


def canvas_settings(decode: dict, directory, unused: tuple[str, ...] = ()) -> dict:
    """The decode settings given (DecodeConfig names) as CanvasConfig overrides. One it has no use for is
    refused by its flag name, with `unused` (flags the caller already found so), not ignored."""
    unused = [*unused, *(f"--{k.replace('_', '-')}" for k in decode if k not in CANVAS_SETTINGS)]
    if unused:
        raise ValueError(f"{', '.join(unused)}: not used by diffusion_gemma canvas decoding ({directory}); it takes "
                         "--max-new-tokens, --steps-per-block (max denoising steps), --entropy-bound, --chunk-steps, "
                         "--seed, the rest from generation_config.json")
    settings = {CANVAS_SETTINGS[k]: v for k, v in decode.items()}
    if settings.get("max_denoising_steps") == 0:  # 0 is the checkpoint's default, as for the server
        settings["max_denoising_steps"] = None
    return settings
