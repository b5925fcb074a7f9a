"""The convert recipe's `ar_aux`: the same windows again as causal rows with a next-token loss, so the
converted checkpoint keeps its base's AR path (issue 21's lesson, carried to issue 22) and can decode
self-speculatively."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from orl.checkpoint import load_checkpoint
from orl.model.vocab import special_ids
from orl.train import convert as cv
from orl.train.batches import next_token_batch
from orl.train.corpus import read_corpus
from test_convert import TOK, base, smoke_cfg  # noqa: F401  (base: a module fixture)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_next_token_batch_by_hand():
    rows = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    b = next_token_batch(rows)
    assert b.tokens.tolist() == [[5, 6, 7], [9, 10, 11]] and b.targets.tolist() == [[6, 7, 8], [10, 11, 12]]
    assert b.weight.tolist() == [[1.0] * 3] * 2 and b.pos.tolist() == [[0, 1, 2]] * 2 and b.read_from is None
    assert b.mask[0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]


@pytest.fixture(scope="module")
def run(base, tmp_path_factory):
    """A smoke conversion with ar_aux 1.0 (it builds the smoke corpus), and the corpus's streams."""
    out = tmp_path_factory.mktemp("aux") / "run"
    cfg = smoke_cfg(base, ar_aux=1.0)
    cv.convert(cfg, out, log=lambda *_: None)
    return out, read_corpus(cfg.data_dir)


def test_aux_rows_are_the_same_windows_causally_and_leave_the_diffusion_rows_alone(base, run):
    cfg, streams = smoke_cfg(base), run[1]
    ids = special_ids(TOK, 512)
    plain = cv.make_batches(cfg, streams, ids, step=3)
    aux = cv.make_batches(replace(cfg, ar_aux=0.5), streams, ids, step=3)
    n = len(plain)
    assert n and len(aux) == 2 * n
    for a, b in zip(plain, aux[:n]):  # the diffusion rows do not move when the aux rows are added
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.weight, b.weight)
    for d, x in zip(plain, aux[n:]):
        assert (x.weight == 0.5).all() and x.read_from is None
        window = torch.cat([x.tokens, x.targets[:, -1:]], 1)
        assert window.shape[1] == cfg.window
        assert torch.equal(window[:, :cfg.context], d.tokens[:, :cfg.context])  # the clean context is its start


def test_aux_loss_is_the_causal_next_token_ce(run):
    """masked_loss_sum on an aux batch of the converted (shifted) model = weight x the plain causal CE of
    its own logits: the AR read-out is each position's own."""
    model = load_checkpoint(run[0])[0]
    assert model.args.shift_logits
    rows = torch.randint(0, TOK.vocab_size, (3, 12), generator=torch.Generator().manual_seed(0))
    b = next_token_batch(rows)
    b.weight *= 2.0
    got = cv.masked_loss_sum(model, b, chunk=5)
    logits = model(b.tokens, b.pos, b.mask)
    want = 2.0 * F.cross_entropy(logits.flatten(0, 1), b.targets.flatten(), reduction="sum")
    assert torch.allclose(got, want, rtol=1e-5)


def test_a_run_with_ar_aux_records_it_and_bad_values_are_named(base, run):
    _, _, manifest = load_checkpoint(run[0])
    assert manifest["recipe"]["config"]["ar_aux"] == 1.0 and manifest["model_args"]["shift_logits"] is True
    with pytest.raises(ValueError, match="ar_aux"):
        smoke_cfg(base, ar_aux=-1.0)
