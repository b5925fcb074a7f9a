"""The load-time transforms of a self-drafting decode: a separate verifier (`--spec-verifier DIR`, and the
verifier a draft-only checkpoint records - a conversion or a draft run with draft_only: orl.train.draft_only,
orl.json recipe.verifier) and a draft vocabulary (`--draft-vocab FILE`, orl.model.draft_vocab), for `orl generate`,
`orl eval` and `orl serve`; drafter_decoder builds the whole fused decoder of a draft-only checkpoint (`orl demo`,
`orl bench --drafter`).

A draft-only checkpoint's own clean rows were never trained (the frozen base ran them), so it decodes only as
a drafter beside its verifier: with the recorded base when it is here and unchanged (its files' digest), else
with --spec-verifier, else not at all (a clear error, never its own untrained AR path).
"""
from __future__ import annotations

from pathlib import Path

from orl.checkpoint import CheckpointError, load_checkpoint, read_manifest, recorded_path, recorded_verifier
from orl.model.row_split import verify_with


def verifier_dir(manifest: dict, path: str | None) -> str | None:
    """The verifier a decode uses: `path` (--spec-verifier), else the one a draft-only run records (relative to
    the repository for a shipped one)."""
    if path:
        return path
    recorded = recorded_verifier(manifest).get("base")
    return str(recorded_path(recorded)) if recorded else None


def attach_verifier(model, manifest: dict, where, path: str | None, spec_draft: str | None, device=None,
                    dtype=None):
    """`model` with the verifier's weights on its clean rows (orl.model.row_split), when `path` is given or the
    checkpoint records one; `model` unchanged otherwise. spec_draft: the decode's --spec-draft (a verifier
    only verifies self-speculative drafts: 'diffusion' or 'fused')."""
    from orl.engine.ar_step import SELF_DRAFTS
    from orl.train.convert_base import base_digest

    recorded = recorded_verifier(manifest)
    if not path and not recorded:
        return model
    if spec_draft not in SELF_DRAFTS:
        what = f"--spec-verifier {path}" if path else f"{where} (a draft-only checkpoint: its clean rows never trained)"
        raise ValueError(f"{what} decodes only self-speculatively: add --spec-draft fused --spec-tokens K (at batch 1: "
                         f"`orl eval --batch-size 1`; its drafts verified by {path or recorded.get('base')})")
    if path and not Path(path).is_dir():
        raise CheckpointError(f"--spec-verifier {path}: no such checkpoint directory")
    path = verifier_dir(manifest, path)
    if not Path(path).is_dir():
        raise CheckpointError(f"{where} drafts for the verifier {path} (orl.json recipe.verifier), which is not "
                              "here: give its directory with --spec-verifier DIR")
    if drafts_for := recorded_verifier(read_manifest(path)).get("base"):
        raise CheckpointError(f"{path} is a draft-only checkpoint (it drafts for {drafts_for}): its clean rows never "
                              "trained, so it cannot verify; give the model it drafts for, or a checkpoint that is not "
                              "a drafter")
    # the verifier in the drafter's dtype (a bf16 base beside an fp32 conversion would fail mid-decode)
    dtype = dtype or next(model.parameters()).dtype
    verifier, _, v_manifest = load_checkpoint(path, device=device or "cpu", dtype=dtype)
    want = recorded.get("base_files_sha256")
    if want and base_digest(path, v_manifest) != want:
        raise CheckpointError(f"{path} is not the verifier {where} was trained against (its files' digest differs "
                              f"from orl.json recipe.verifier.base_files_sha256)")
    return verify_with(model, verifier)


def check_self_draft_flags(spec_verifier: str | None, draft_vocab: str | None, spec_draft: str | None) -> None:
    """Before any load: a verifier or a draft vocabulary only serves self-speculative drafts."""
    from orl.engine.ar_step import SELF_DRAFTS

    given = [f"--spec-verifier {spec_verifier}"] * bool(spec_verifier) + [f"--draft-vocab {draft_vocab}"] * bool(
        draft_vocab)
    if given and spec_draft not in SELF_DRAFTS:
        raise ValueError(f"{', '.join(given)}: only for self-speculative decoding (--spec-draft diffusion | fused "
                         "--spec-tokens K)")


def attach_draft_vocab(model, path: str | None, spec_draft: str | None, model_dir=None, tokenizer=None):
    """`model` whose draft rows score only the ids of the file at `path` (orl.model.draft_vocab); unchanged when
    no path. Applied after attach_verifier (the head it copies is then the drafter's). model_dir: its
    tokenizer.json must be the one the file was written for (when both record it); tokenizer: at least one id
    must be draftable (not the mask, not past the tokenizer's vocabulary)."""
    from orl.model.draft_vocab import draft_vocab, read_ids, tokenizer_digest

    if not path:
        return model
    check_self_draft_flags(None, path, spec_draft)
    ids = read_ids(path, model.lm_head.weight.shape[0], tokenizer_digest(model_dir) if model_dir else None)
    if tokenizer is not None:
        usable = [i for i in ids.tolist() if i < tokenizer.vocab_size and i != getattr(tokenizer, "mask_id", None)]
        if not usable:
            raise ValueError(f"draft vocabulary {path}: none of its ids can be drafted (the mask token, or past the "
                             "tokenizer's vocabulary)")
    return draft_vocab(model, ids)


def attach_self_draft(model, manifest: dict, model_dir, tokenizer, spec_verifier: str | None,
                      draft_vocab_path: str | None, spec_draft: str | None, device=None, dtype=None):
    """What every decoding command applies after the load: the verifier (attach_verifier), then the draft
    vocabulary (attach_draft_vocab, on the drafter's head)."""
    model = attach_verifier(model, manifest, model_dir, spec_verifier, spec_draft, device, dtype)
    return attach_draft_vocab(model, draft_vocab_path, spec_draft, model_dir, tokenizer)


def drafter_decoder(path, device=None):
    """The ARDecoder of a draft-only checkpoint at `path` beside the verifier it records: decoded with spec_draft
    "fused", it emits the verifier's greedy tokens at the drafter's acceptance."""
    from orl.engine.ar import ARDecoder

    model, tok, manifest = load_checkpoint(path, device=device or "cpu")
    model = attach_self_draft(model, manifest, path, tok, None, None, "fused", device=device)
    return ARDecoder(model, tok, manifest=manifest)
