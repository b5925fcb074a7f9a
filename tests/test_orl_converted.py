"""`orl train --recipe orl|rcd --base <converted>` end to end on a tiny converted checkpoint (issue 22
item 4): the CLI runs the gemma presets' smoke variants, an interrupted run resumes to the weights of
an uninterrupted one, and the result keeps its base's layout, tokenizer and decode fields, so
`orl generate` and `orl eval` decode it on the absolute grid."""
from __future__ import annotations

import json

import pytest
import torch

import orl.train.orl as trainer
import orl.train.rcd as rcd
from converted_fixture import EXTRA_EOS, converted_checkpoint
from test_orl_trainer import accept_everything  # noqa: F401 (a fixture: every rollout kept)
from orl.checkpoint import load_checkpoint
from orl.cli import main
from orl.presets import get_preset

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    return converted_checkpoint(tmp_path_factory.mktemp("conv"))


def train(recipe, conv, out, *extra) -> int:
    return main(["train", "--recipe", recipe, "--preset", "gemma_smoke", "--base", str(conv), "--out", str(out),
                 "--set", "threads=1", *extra])


def crash_at_second(monkeypatch, module, name):
    """The second call of module.name raises (after update 1's checkpoint: save_every=1)."""
    real, calls = getattr(module, name), []

    def crashing(*a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)
    monkeypatch.setattr(module, name, crashing)
    return real


def same_weights(a, b) -> None:
    for (n, x), y in zip(load_checkpoint(a)[0].state_dict().items(), load_checkpoint(b)[0].state_dict().values()):
        assert torch.equal(x, y), n


def check_result(conv, out, recipe: str, residual: str, tmp_path) -> None:
    model, tok, manifest = load_checkpoint(out)
    base = json.loads((conv / "orl.json").read_text())
    assert (manifest["objective"], manifest["layout"], manifest["block_len"]) == ("block_diffusion", "absolute_grid", 4)
    assert manifest["residual_mode"] == residual and manifest["recipe"]["name"] == recipe
    assert manifest["recipe"]["config"]["tasks"] == ["constr"]  # the conversion's task text (corpus.tasks)
    assert all(manifest[k] == base[k] for k in ("mask_id", "eos_id", "pad_id", "family"))
    for f in ("tokenizer.json", "tokenizer_config.json"):  # the HF tokenizer travels unchanged
        assert (out / f).read_bytes() == (conv / f).read_bytes()
    assert tok.bos_id == 2 and model.args.shift_logits
    assert manifest["eos_ids"] == [1, EXTRA_EOS] and tok.eos_ids == (1, EXTRA_EOS)  # the base's EOS ids stay
    assert main(["generate", "--model", str(out), "--max-new-tokens", "8", "--device", "cpu", "x = 1"]) == 0
    rec_path = tmp_path / f"{recipe}-eval.jsonl"
    assert main(["eval", "--model", str(out), "--tasks", "constr", "--limit", "2", "--max-new-tokens", "8",
                 "--out", str(rec_path), "--no-progress"]) == 0
    recs = [json.loads(x) for x in rec_path.read_text().splitlines()]
    assert len(recs) == 2 and all(r["task"] == "constr" for r in recs)


def test_orl_on_a_converted_model_runs_resumes_and_evaluates(conv, tmp_path, accept_everything, monkeypatch):
    assert train("orl", conv, tmp_path / "whole") == 0
    log = [json.loads(x) for x in (tmp_path / "whole" / "train.log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [1, 2] and all(r["kept"] == 4 and r["loss"] > 0 for r in log)
    real = crash_at_second(monkeypatch, trainer, "orl_loss")
    assert train("orl", conv, tmp_path / "cut") == 130  # interrupted in update 2
    monkeypatch.setattr(trainer, "orl_loss", real)
    assert train("orl", conv, tmp_path / "cut") == 0  # resumes at update 2
    same_weights(tmp_path / "whole", tmp_path / "cut")
    check_result(conv, tmp_path / "cut", "orl", "adapter", tmp_path)


def test_stale_ablation_on_a_converted_model_replays_one_rollout_batch_twice(conv, tmp_path, accept_everything):
    assert train("orl", conv, tmp_path / "stale", "--set", "rollout_reuse=2") == 0
    log = [json.loads(x) for x in (tmp_path / "stale" / "train.log.jsonl").read_text().splitlines()]
    assert log[0]["generated_tokens"] == log[1]["generated_tokens"] > 0  # no new rollouts for update 2
    assert log[0]["loss"] != log[1]["loss"]  # the same states, replayed by updated weights


def test_rcd_on_a_converted_model_runs_resumes_and_evaluates(conv, tmp_path, accept_everything, monkeypatch):
    assert train("rcd", conv, tmp_path / "whole") == 0
    log = [json.loads(x) for x in (tmp_path / "whole" / "train.log.jsonl").read_text().splitlines()]
    assert [r["update"] for r in log] == [1, 2] and all(r["kept"] == 4 for r in log)
    real = crash_at_second(monkeypatch, rcd, "residual_state")
    assert train("rcd", conv, tmp_path / "cut") == 130
    monkeypatch.setattr(rcd, "residual_state", real)
    assert train("rcd", conv, tmp_path / "cut") == 0
    same_weights(tmp_path / "whole", tmp_path / "cut")
    check_result(conv, tmp_path / "cut", "rcd", "rcd", tmp_path)


def test_gemma_presets_differ_from_gemma_orl_only_where_intended():
    main_cfg = get_preset("orl", "gemma_orl")
    assert (main_cfg.rollout.block_len, main_cfg.rollout.threshold, main_cfg.base) == (4, 0.9, "")
    changed = {"gemma_orl_no_aec": {"weights"}, "gemma_orl_no_residual": {"rollout"},
               "gemma_orl_stale": {"rollout_reuse"}}
    for name, fields in changed.items():
        p = get_preset("orl", name)
        diff = {f for f in main_cfg.to_dict() if getattr(p, f) != getattr(main_cfg, f)}
        assert diff == fields, name
    assert get_preset("orl", "gemma_orl_no_aec").weights.lambda_aec == 0
    assert get_preset("orl", "gemma_orl_no_residual").rollout.residual == "off"
    assert get_preset("orl", "gemma_orl_stale").rollout_reuse == 4
    r = get_preset("rcd", "gemma_rcd")
    assert (r.tasks, r.updates, r.prompts_per_update, r.group_size, r.seed, r.rollout.max_new_tokens) == (
        main_cfg.tasks, main_cfg.updates, main_cfg.prompts_per_update, main_cfg.group_size, main_cfg.seed,
        main_cfg.rollout.max_new_tokens)


def test_a_gemma_preset_without_base_is_refused_by_name(tmp_path):
    assert main(["train", "--recipe", "orl", "--preset", "gemma_orl", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_rcd_grid_rows_never_mask_the_prompt_tail():
    """RCD on a grid base: the prompt's partial last block opens the first answer block (as in the
    engine's first canvas) and is never masked nor trained on; the answer after it is."""
    from orl.model.vocab import SpecialIds
    from orl.train.batches import diffusion_batch, grid_pairs

    pairs, fixed = grid_pairs([([2, 5, 6, 7, 8, 9], [10, 11])], 4)
    assert pairs == [([2, 5, 6, 7], [8, 9, 10, 11])] and fixed == [2]
    ids = SpecialIds(mask=4, eos=1, pad=0)
    seen = torch.zeros(5, dtype=torch.bool)  # ever masked: 8, 9 (tail), 10, 11 (answer), the EOS after them
    for seed in range(40):
        b = diffusion_batch(pairs, 4, ids, torch.Generator().manual_seed(seed), grid=True, fixed=fixed)
        noisy = b.tokens[0, 12:]  # clean: 4 prompt + 8 answer slots (2 blocks), then one noisy copy per block
        masked = noisy == ids.mask
        assert torch.equal(masked, b.weight[0, 12:] > 0)
        seen |= masked[:5]
    assert seen.tolist() == [False, False, True, True, True]


def test_a_base_in_a_layout_the_replay_cannot_rebuild_is_refused_by_name():
    from orl.engine import DecodeConfig
    from orl.train.orl import base_layout

    assert base_layout({"layout": "absolute_grid", "block_len": 4}, DecodeConfig(block_len=16)).block_len == 4
    assert base_layout({}, DecodeConfig(layout="absolute_grid")).layout == "prompt_block"  # shipped tiny models
    with pytest.raises(ValueError, match="rollouts need a block layout"):
        base_layout({"layout": "full_sequence", "block_len": 32}, DecodeConfig())


def test_reference_relabelling_trains_on_a_stop_string_task(conv, tmp_path):
    """A one-line data task (stop "\\n") the tiny model never answers: relabel=reference still trains on the states
    before each rollout's first wrong commit, toward the reference answer and its newline."""
    rows = [{"prompt": f"a{i} = {i}\nb{i} =", "answer": f" {i + 1}", "stop": "\n",
             "split": "train" if i < 6 else "heldout"} for i in range(8)]
    path = tmp_path / "lines.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert train("orl", conv, tmp_path / "ref", "--tasks-file", f"lines={path}", "--set", "relabel=reference") == 0
    log = [json.loads(x) for x in (tmp_path / "ref" / "train.log.jsonl").read_text().splitlines()]
    assert all(r["rollout_verified"] == 0 for r in log)
    assert sum(r["relabelled"] for r in log) > 0 and all(r["kept"] == r["relabelled"] for r in log)
    assert any(r["pred"] > 0 for r in log if r["relabelled"])
