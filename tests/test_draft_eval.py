"""orl.train.draft_eval.draft_agreement: per-draft agreement with the AR path and the accepted run length, checked
against uncached forwards cut by cut (the drafts of [x[0:c], m masks], the greedy tokens of the causal forward)."""
import pytest
import torch

from orl.model.args import ModelArgs
from orl.model.model import Transformer
from orl.train.draft_eval import draft_agreement

pytestmark = pytest.mark.usefixtures("one_thread")

MASK, PAD, V = 3, 0, 16  # a small vocabulary, so drafts agree with the AR path often enough to count runs


def test_agreement_and_runs_equal_the_uncached_cut_by_cut_count():
    torch.manual_seed(0)
    model = Transformer(ModelArgs(vocab_size=V, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, ffn_dim=64,
                                  max_seq_len=128, shift_logits=True, tie_embeddings=False)).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(std=p.shape[1] ** -0.5)
    rows = torch.randint(4, V, (3, 15))
    start, m, stride = 5, 3, 2
    got = draft_agreement(model, rows, start, m, stride, MASK, PAD, chunk=7)
    hits, live, runs = [0] * m, [0] * m, []
    with torch.no_grad():
        for x in rows.tolist():
            T = len(x)
            greedy = model(torch.tensor([x]), torch.arange(T)[None], torch.ones(T, T, dtype=torch.bool).tril()[None]
                           )[0].argmax(-1)
            for c in range(start, T - 1, stride):
                seq = torch.tensor([x[:c] + [MASK] * m])
                q, k = torch.arange(c + m)[:, None], torch.arange(c + m)[None, :]
                mask = (k <= q) | ((k >= c) & (q >= c))
                drafts = model(seq, torch.arange(c + m)[None], mask[None])[0, c:].argmax(-1)
                run, going = 0, True
                for j in range(m):
                    if c + 1 + j >= T:
                        going = False
                        continue
                    ok = bool(drafts[j] == greedy[c + j])
                    hits[j] += ok
                    live[j] += 1
                    going = going and ok
                    run += going
                runs.append(run)
    assert got["cuts"] == len(runs)
    assert got["agree"] == [round(h / n, 4) for h, n in zip(hits, live)]
    assert got["accepted"] == round(sum(runs) / len(runs), 4) and got["tpf_estimate"] == round(1 + sum(runs) / len(runs), 4)
    assert got["counts"] == {"hits": hits, "live": live, "run_sum": sum(runs)}
    assert 0 < sum(runs)  # the check counted something
