"""ORLConfig refuses loss weights that make the DESIGN section 4 objective meaningless, by name, instead of
training on garbage: L_AEC = max(0, H(k+1) - (1 - rho) stopgrad H(k))^2 needs rho in [0, 1] (rho > 1 makes the
target negative, so every pair is penalised even when the entropy contracts; rho < 0 lets it grow), the
lambdas are weights of losses to minimise (>= 0), and min(KL, c) with c <= 0 is a constant: the anchor is off."""
import math

import pytest
import torch

from orl.train.losses import aec_pairs
from orl.train.objective import LossWeights
from orl.train.orl import ORLConfig


def test_rho_above_one_penalises_a_contraction():
    # why the check exists: entropy 0.40 -> 0.30 contracts, yet rho 1.5 gives (0.30 + 0.5 * 0.40)^2 = 0.25
    assert aec_pairs(torch.tensor([0.40]), torch.tensor([0.30]), rho=1.5).item() == pytest.approx(0.25)


@pytest.mark.parametrize("field,value", [("rho", 1.5), ("rho", -0.1), ("rho", math.nan), ("lambda_aec", -1.0),
                                         ("lambda_kl", -0.1), ("kl_cap", 0.0), ("kl_cap", -1.0),
                                         ("lambda_aec", math.inf)])
def test_bad_loss_weights_are_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"weights.{field}"):
        ORLConfig(weights=LossWeights(**{field: value}))


@pytest.mark.parametrize("kw", [{}, {"rho": 0.0}, {"rho": 1.0}, {"lambda_aec": 0.0, "lambda_kl": 0.0},
                                {"kl_cap": 0.5}])
def test_sane_loss_weights_pass(kw):
    ORLConfig(weights=LossWeights(**kw))
