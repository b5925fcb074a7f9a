"""benchmarks/knowledge_tpf.py: the reference-gated commit on the shipped ORL model. With the model's own
commit-everything output as the reference it takes the same forwards; with a task's reference it writes that
reference, every position committed once (right argmax, forced, or EOS fill); the engine is restored after."""
import importlib.util
from pathlib import Path

import torch

import orl.engine.engine as engine_mod
from orl.checkpoint import load_checkpoint
from orl.engine import DecodeConfig, Engine, layouts
from orl.eval.tasks import make_samples

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("knowledge_tpf", ROOT / "benchmarks" / "knowledge_tpf.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
MAX_NEW = 48


def setup():
    model, tok, manifest = load_checkpoint(ROOT / "checkpoints" / "orl-tiny7-orl")
    return Engine(model, tok, manifest=manifest), manifest


def refs_of(engine, answers):
    refs = torch.full((len(answers), MAX_NEW), engine.ids.eos, dtype=torch.long)
    for b, a in enumerate(answers):
        ids = a[:MAX_NEW]
        refs[b, : len(ids)] = torch.tensor(ids)
    return refs


def test_own_output_as_reference_takes_the_same_forwards():
    engine, manifest = setup()
    cfg = DecodeConfig.from_manifest(manifest, threshold=1e-9, max_new_tokens=MAX_NEW).validate()  # commit all
    prompts = [engine.encode(s.prompt) for s in make_samples("long7xp", "heldout", 3, 0)]
    plain = engine.generate_ids(prompts, cfg)
    oracle = mod.Oracle(refs_of(engine, [g.token_ids for g in plain]), MAX_NEW)
    with mod.oracle_engine(engine, oracle):
        gens = engine.generate_ids(prompts, cfg, trace=True)
    assert [g.token_ids for g in gens] == [g.token_ids for g in plain]
    assert [g.forwards for g in gens] == [g.forwards for g in plain]
    assert oracle.forced == 0


def test_task_reference_is_written_and_the_engine_restored():
    engine, manifest = setup()
    cfg = DecodeConfig.from_manifest(manifest, threshold=0.9, max_new_tokens=MAX_NEW).validate()
    samples = make_samples("prog7xp", "heldout", 4, 0)
    prompts = [engine.encode(s.prompt) for s in samples]
    before = engine.generate_ids(prompts, cfg)
    refs = refs_of(engine, [engine.encode(s.answer) for s in samples])
    oracle = mod.Oracle(refs, MAX_NEW)
    step_fn = engine_mod.denoise_step
    with mod.oracle_engine(engine, oracle):
        gens = engine.generate_ids(prompts, cfg, trace=True)
    eos = engine.ids.eos
    for g, r in zip(gens, refs.tolist()):
        assert g.token_ids == r[: r.index(eos) + 1]
    # every answer position of every decoded block is committed exactly once
    L, plan = cfg.block_len, layouts.plan(prompts, cfg.layout, cfg.block_len, MAX_NEW)
    positions = 0
    for b, g in enumerate(gens):  # the blocks up to the EOS's (absolute grid: a prompt tail in the first)
        j = 0
        while mod.answer_offset(plan, j, L, MAX_NEW, b) < g.n_tokens:
            lo, hi = plan.block_span(j, L, MAX_NEW)[b]
            positions, j = positions + hi - lo, j + 1
    assert oracle.right + oracle.forced == positions
    assert oracle.forced > 0  # prog7xp is hard for it: some forwards learn nothing
    assert engine_mod.denoise_step is step_fn and "begin_block" not in vars(engine)
    after = engine.generate_ids(prompts, cfg)
    assert [g.token_ids for g in after] == [g.token_ids for g in before]


def test_script_reports_ratios_of_sums(tmp_path, monkeypatch, capsys):
    import json
    import sys
    out = tmp_path / "k.json"
    monkeypatch.setattr(sys, "argv", ["knowledge_tpf.py", "--model", str(ROOT / "checkpoints" / "orl-tiny7-orl"),
                                      "--tasks", "long7xp,constr7xp", "--seeds", "0", "--limit", "6",
                                      "--max-new-tokens", "48", "--out", str(out)])
    mod.main()
    fams = json.loads(out.read_text())["families"]
    for fam, r in fams.items():
        assert r["n"] == (12 if fam == "all" else 6)
        # own answers on the prompts it gets right: the oracle writes the same tokens as the threshold decoder,
        # in no more forwards here (likely, not certain: the two trajectories part after their first step)
        assert r["c_o_tokens"] == r["c_tokens"] and r["c_o_forwards"] <= r["c_forwards"]
        assert r["o_right"] + r["o_forced"] >= r["o_tokens"]
    assert fams["all"]["correct"] > 0
    text = capsys.readouterr().out
    a = fams["all"]
    all_row = text.splitlines()[-4]
    assert f"{a['tokens'] / a['forwards']:.2f}" in all_row and f"{a['o_tokens'] / a['o_forwards']:.2f}" in all_row


def test_oracle_step_commits_by_hand():
    """One step on a hand-made state: right argmaxes only; one forced reference token (the most confident live
    position, with neg-entropy scores below -1) when none is right; the EOS fill; a prompt-tail position and a finished
    row untouched; whatever the engine's own step committed undone."""
    from types import SimpleNamespace

    from orl.model.vocab import special_ids
    from orl.tokenizer import CharTokenizer

    tok = CharTokenizer()
    ids = special_ids(tok, tok.vocab_size)
    E, M, W = ids.eos, ids.mask, 9  # W: a wrong token
    assert W not in (E, M)

    class Plan:
        def block_span(self, j, L, max_new):
            return [(0, 4), (0, 4), (1, 4), (0, 4)]  # row 2 starts with a prompt tail

    refs = torch.tensor([[5, 6, 7, 8] * 2, [5, 6, 7, 8] * 2, [E] * 8, [5, 6, 7, 8] * 2])
    unres = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    st = SimpleNamespace(block_len=4, plan=Plan(), canvas=torch.where(unres, M, 3), unresolved=unres.clone(),
                         fixed=torch.tensor([[0] * 4, [0] * 4, [1, 0, 0, 0], [0] * 4], dtype=torch.bool),
                         last_x=torch.zeros(4, 4, dtype=torch.long), last_conf=torch.zeros(4, 4),
                         last_commit=torch.zeros(4, 4, dtype=torch.bool))

    def engine_step(model, st, cfg, ids, record=False, fused=False):
        st.last_x.copy_(torch.tensor([[5, W, 7, W], [W, W, W, W], [E, W, E, W], [5, 6, 7, 8]]))
        st.last_conf.copy_(torch.tensor([[.5] * 4, [-5.0, -3.0, -1.5, -2.0], [.5] * 4, [1.0] * 4]))
        st.canvas.fill_(W)  # the engine's own commit, which the oracle replaces
        st.unresolved.fill_(False)

    oracle = mod.Oracle(refs, 8)
    oracle.begin(st, 0)
    oracle.step(engine_step, None, st, None, ids)
    assert st.canvas.tolist() == [[5, M, 7, M], [3, M, 7, M], [3, M, E, E], [3, 3, 3, 3]]
    assert st.unresolved.tolist() == [[False, True, False, True], [False, True, False, True],
                                      [False, True, False, False], [False] * 4]
    assert st.last_commit.tolist() == [[True, False, True, False], [False, False, True, False],
                                       [False, False, True, True], [False] * 4]
    assert (oracle.right, oracle.forced) == (4, 1)  # 2 + 1 right, 1 EOS fill; row 1's forced token
