"""The fused self-draft (ARConfig.spec_draft = "fused", orl.engine.self_draft.fused_verify): each verify forward
also drafts the next round for every acceptance length, so a round is one forward; the tokens are still
exactly the AR path's (greedy and sampled: tests/test_self_draft.py), the verify rows never see the draft
groups, and the groups' scratch slots never touch the sequence, even at the end of the model's context."""
import pytest
import torch

import orl.engine.speculative as spec
from orl.engine.ar import ARConfig
from orl.engine.self_draft import all_groups, fused_verify, likely_groups, scratch_slots
from orl.engine.speculative import verify
from test_self_draft import base  # noqa: F401  (the shipped base as an ARDecoder, a module fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_one_forward_per_round_and_fewer_than_two_forward_drafting(base, monkeypatch):
    """step_forwards counts one forward per round (no draft forwards), and on the shipped base's cumsum the
    fused rounds need fewer forwards than the two-forward drafter for the same tokens."""
    rounds = []
    real = spec.fused_verify
    monkeypatch.setattr(spec, "fused_verify", lambda *a: rounds.append(1) or real(*a))
    p = ["cumsum:877347649366134="]
    g = base.generate(p, ARConfig(max_new_tokens=40, spec_tokens=8, spec_draft="fused"))[0]
    two = base.generate(p, ARConfig(max_new_tokens=40, spec_tokens=8, spec_draft="diffusion"))[0]
    assert g.step_forwards == len(rounds) and g.token_ids == two.token_ids
    assert g.step_forwards < two.step_forwards and g.tpf > 1.5, (g.step_forwards, two.step_forwards)


def test_verify_rows_do_not_see_the_groups(base):
    """fused_verify's targets are the plain verify's on the same tokens and slots."""
    tok = base.tokenizer
    prompt, draft = tok.encode("cumsum:8773476="), tok.encode("8,15,22")
    cfg = ARConfig(max_new_tokens=16)
    st = base.setup([prompt], cfg, extra=scratch_slots(len(draft), 16))
    targets = fused_verify(base.model, st, len(prompt) - 1, prompt[-1:] + draft, tok.encode("9.3"),
                           len(draft), tok.mask_id, 0.0, 0).targets
    st = base.setup([prompt], cfg)
    assert targets == verify(base.model, st, len(prompt) - 1, prompt[-1:] + draft, 0.0, 0)


def uncached(model, seq: list[int], clean: int, guess: bool, m: int, mask_id: int) -> tuple[list[int], list[int]]:
    """Top-2 read-out of the last m positions of seq by a plain forward: positions < clean causal; after
    them m positions that see each other (a guess, first of them, sees only itself among them)."""
    x = torch.tensor([seq])
    T = x.shape[1]
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    mask = (k <= q) | (k >= clean) & (q >= clean) & ~((q == clean) & torch.tensor(guess))
    logits = model(x, torch.arange(T)[None], mask[None])[0]
    logits[:, mask_id] = float("-inf")
    top = logits[clean:clean + m].topk(2, -1).indices
    return top[:, 0].tolist(), top[:, 1].tolist()


def test_groups_are_the_diffusion_read_out_after_d_a(base):
    """Group a's drafts (and second choices) are those of an uncached forward over [prompt, d_1..d_a, m
    masks]; guess group a's are those of [prompt, d_1..d_a, guess, m - 1 masks] with the guess clean."""
    model, tok = base.model, base.tokenizer
    prompt, draft, guesses, m = tok.encode("sort:dcba="), tok.encode("a,b"), tok.encode("b;"), 4
    st = base.setup([prompt], ARConfig(max_new_tokens=12), extra=scratch_slots(m, 12))
    r = fused_verify(model, st, len(prompt) - 1, prompt[-1:] + draft, guesses, m, tok.mask_id, 0.0, 0)
    drafts, seconds = r.drafts, r.seconds
    T = len(draft) + 1
    assert len(drafts) == T + len(guesses) and all(len(d) == m for d in drafts)
    for a in range(T):
        want = uncached(model, prompt + draft[:a] + [tok.mask_id] * m, len(prompt) + a, False, m, tok.mask_id)
        assert (drafts[a], seconds[a]) == want, a
    for a, g in enumerate(guesses):
        want = uncached(model, prompt + draft[:a] + [g] + [tok.mask_id] * (m - 1), len(prompt) + a, True, m,
                        tok.mask_id)
        assert (drafts[T + a], seconds[T + a]) == want, a


@pytest.mark.parametrize("n_groups", [0, 2, 3])
def test_a_right_guess_takes_its_group(base, monkeypatch, n_groups):
    """After a rejection at d_{a+1}, the next draft comes from guess group a when the guess is the verify's
    bonus token (and the round carried that group), else from mask group a (if carried), else there is none:
    the loop's choice, re-derived from each round's groups, for all groups and for spec_groups 2 and 3."""
    picks, expect = {"guess": 0, "mask": 0, "none": 0}, {"draft": [], "guesses": []}
    real = spec.fused_verify

    def spy(model, st, slot, tokens, guesses, *rest):
        # the round drafts what the rule picked, and guesses that group's second choices
        assert tokens[1:] == expect["draft"][:len(tokens) - 1]
        assert guesses == expect["guesses"][:len(tokens) - 1] and len(guesses) == len(tokens) - 1
        groups = rest[4]
        assert len(groups) <= (n_groups or 2 * len(tokens) - 1)
        r = real(model, st, slot, tokens, guesses, *rest)
        t, d, s = r.targets, r.drafts, r.seconds
        n = spec.accepted(tokens[1:], t)
        right = n < len(guesses) and guesses[n] == t[n] and (n, True) in groups
        g = groups.index((n, right)) if right or (n, False) in groups else None
        if n < len(guesses) or g is None:
            picks["guess" if right else "mask" if g is not None else "none"] += 1
        expect["draft"], expect["guesses"] = (d[g], s[g]) if g is not None else ([], [])
        return r
    monkeypatch.setattr(spec, "fused_verify", spy)
    p = ["cumsum:877347649366134=", "cumsum:93581726354=", "sort:j5,e4,a3,b4,d3,h2,i3="]
    for q in p:
        expect["draft"], expect["guesses"] = [], []
        base.generate([q], ARConfig(max_new_tokens=40, spec_tokens=8, spec_draft="fused", spec_groups=n_groups))
    # every path is taken: with all groups a round always has one to continue from, with fewer sometimes none
    assert picks["mask"] > 0 and (picks["guess"] > 0 or n_groups) and (picks["none"] > 0) == (n_groups > 0), picks


def test_scratch_beyond_the_context_leaves_the_sequence_alone(base):
    """A request that fills the model's whole context: the groups' scratch slots lie past it (storage
    only), and the tokens are still plain AR's; a plain request after it gets a cache without scratch."""
    tok, L = base.tokenizer, base.max_len
    prompt = tok.encode("cumsum:877347649366134=")
    n = L - len(prompt)
    plain = base.generate_ids([prompt], ARConfig(max_new_tokens=n))[0]
    fused = base.generate_ids([prompt], ARConfig(max_new_tokens=n, spec_tokens=8, spec_draft="fused"))[0]
    assert fused.token_ids == plain.token_ids
    assert base._states[1, True].cache.max_len >= L + scratch_slots(8, n) > L
    base.generate_ids([prompt], ARConfig(max_new_tokens=4))
    assert base._states[1, False].cache.max_len <= L


def test_scratch_and_groups_follow_what_the_answer_can_use(base, monkeypatch):
    """Large k, short answer: the scratch and the groups are cut to max_new_tokens (a round's groups draft
    only what the next round can verify; the last round has none), and the state is reused across
    requests of other lengths and k with the same tokens as plain decoding."""
    assert scratch_slots(32, 5) == 9 * 4 and scratch_slots(8, 1) == 0 and scratch_slots(8, 100) == 17 * 8
    sizes = []
    real = spec.fused_verify
    monkeypatch.setattr(spec, "fused_verify", lambda *a: sizes.append(a[5]) or real(*a))
    p = "cumsum:877347649366134="
    for n, k in ((6, 32), (40, 8), (3, 4), (1, 8), (25, 2)):
        sizes.clear()
        g = base.generate([p], ARConfig(max_new_tokens=n, spec_tokens=k, spec_draft="fused"))[0]
        assert g.token_ids == base.generate([p], ARConfig(max_new_tokens=n))[0].token_ids, (n, k)
        assert all(0 < m <= min(k, n - 2) for m in sizes), (n, k, sizes)


def test_validation():
    with pytest.raises(ValueError, match="spec_tokens > 0"):
        ARConfig(spec_draft="fused").validate()
    with pytest.raises(ValueError, match="spec_ngram"):
        ARConfig(spec_tokens=2, spec_ngram=3, spec_draft="fused").validate()
    with pytest.raises(ValueError, match="at most 32"):
        ARConfig(spec_tokens=33, spec_draft="fused").validate()
    ARConfig(spec_tokens=33, spec_draft="diffusion").validate()
    with pytest.raises(ValueError, match="spec_groups"):
        ARConfig(spec_tokens=4, spec_draft="diffusion", spec_groups=2).validate()
    with pytest.raises(ValueError, match=r"spec_groups must be in 0\.\.8"):
        ARConfig(spec_tokens=4, spec_draft="fused", spec_groups=-1).validate()
    with pytest.raises(ValueError, match=r"spec_groups must be in 0\.\.8"):  # 9 = all: say 0
        ARConfig(spec_tokens=4, spec_draft="fused", spec_groups=9).validate()
    ARConfig(spec_tokens=4, spec_draft="fused", spec_groups=8).validate()
    assert scratch_slots(8, 100, 3) == 3 * 8 and scratch_slots(8, 100, 0) == scratch_slots(8, 100, 17) == 17 * 8


def test_likely_groups_by_hand():
    """probs [[0.75, 0.125], [0.5, 0.375]]: d_1 rejected: 1 - 0.75 = 0.25 (mask group 0, any bonus token), its guess
    0.125 (guess group 0); d_1 accepted (0.75), d_2 rejected: 0.75 * 0.5 = 0.375 (mask 1), its guess 0.75 * 0.375 =
    0.28125 (guess 1); both accepted 0.75 * 0.5 = 0.375 (mask 2). Ties: the shorter acceptance, mask first
    (binary fractions: the products are exact)."""
    probs = [[0.75, 0.125], [0.5, 0.375]]
    assert likely_groups(probs, 2) == [(1, False), (2, False)]
    assert likely_groups(probs, 9) == [(1, False), (2, False), (1, True), (0, False), (0, True)]
    # a guess group never ranks above its own mask group (its guess is one of the bonus tokens the mask serves)
    assert likely_groups([[0.1, 0.9]], 1) == [(0, False)]
    assert likely_groups([], 4) == [(0, False)]  # no draft: the one group after the last token
    assert all_groups(3, 2) == [(0, False), (1, False), (2, False), (0, True), (1, True)]


def test_a_subset_of_groups_drafts_as_in_the_full_round(base):
    """Groups never see each other: a round with some of them drafts (and scores) each exactly as the round with
    all of them does; the probabilities are the draft's top two, in order."""
    tok = base.tokenizer
    prompt, draft, guesses, m = tok.encode("cumsum:8773476="), tok.encode("8,15,22"), tok.encode("9.3"), 5
    cfg = ARConfig(max_new_tokens=16)
    st = base.setup([prompt], cfg, extra=scratch_slots(len(draft), 16))
    args = (base.model, st, len(prompt) - 1, prompt[-1:] + draft, guesses, m, tok.mask_id, 0.0, 0)
    full = fused_verify(*args, probs=True)
    groups = all_groups(len(draft) + 1, len(guesses))
    some = [(3, False), (1, True), (0, False)]
    part = fused_verify(*args, some, probs=True)
    assert part.targets == full.targets
    for i, grp in enumerate(some):
        g = groups.index(grp)
        assert (part.drafts[i], part.seconds[i]) == (full.drafts[g], full.seconds[g]), grp
        assert [p for pq in part.probs[i] for p in pq] == pytest.approx([p for pq in full.probs[g] for p in pq], abs=2e-6)
    assert all(1 >= p >= q >= 0 and p + q <= 1 + 1e-5 for g in full.probs for p, q in g)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_fewer_groups_keep_the_ar_paths_tokens_in_shorter_forwards(base, monkeypatch, groups):
    """spec_groups: the tokens are still plain AR decoding's (greedy and sampled), each fused round carries at
    most that many groups, and with 3 groups of the 17 the tiny base still accepts more than a token a forward."""
    from test_self_draft import PROMPTS

    sizes = []
    real = spec.fused_verify
    monkeypatch.setattr(spec, "fused_verify", lambda *a, **kw: sizes.append(len(a[9])) or real(*a, **kw))
    tokens = forwards = 0
    for p in PROMPTS:
        for t, seed in ((0.0, 0), (1.0, 1)):
            plain = base.generate([p], ARConfig(max_new_tokens=40, temperature=t, seed=seed))[0]
            g = base.generate([p], ARConfig(max_new_tokens=40, temperature=t, seed=seed, spec_tokens=8,
                                            spec_draft="fused", spec_groups=groups))[0]
            assert g.token_ids == plain.token_ids, (p, t)
            tokens, forwards = tokens + g.n_tokens, forwards + g.forwards
    assert sizes and max(sizes) <= groups
    if groups >= 3:
        assert tokens / forwards > 1.5, tokens / forwards



def test_bf16_weights_keep_the_ar_paths_tokens():
    """In bf16 the verify rows of a fused forward sit among ~150 positions instead of 9: on these prompts the
    tokens are still plain bf16 AR decoding's (a float difference would show as a changed token)."""
    from orl.checkpoint import load_checkpoint
    from orl.engine.ar import ARDecoder
    from test_self_draft import BASE, PROMPTS

    model, tok, manifest = load_checkpoint(BASE, dtype=torch.bfloat16)
    dec = ARDecoder(model, tok, manifest=manifest)
    for p in PROMPTS[:4]:
        want = dec.generate([p], ARConfig(max_new_tokens=40))[0].token_ids
        for draft in ("diffusion", "fused"):
            assert dec.generate([p], ARConfig(max_new_tokens=40, spec_tokens=8, spec_draft=draft))[0].token_ids == want
