"""Training curves' trailing mean (orl.eval.curves.smooth) with a non-finite logged value.

A loss term can be logged as NaN or inf for one update (an empty denominator, a diverging KL; orl.train.mix
already guards against such losses). The trailing mean over the last `window` values must be NaN/inf only
for the windows that hold that value: a running sum never recovers from it (nan - nan, inf - inf are NaN),
so every later point of the curve read NaN and the plot silently lost the rest of the run."""
import math

from orl.eval.curves import smooth


def test_a_nan_only_spoils_the_windows_that_hold_it():
    out = smooth([1.0, float("nan"), 3.0, 5.0, 7.0], 2)
    assert out[0] == 1.0
    assert math.isnan(out[1]) and math.isnan(out[2])  # windows [1, nan] and [nan, 3]
    assert out[3:] == [4.0, 6.0]                         # (3 + 5) / 2, (5 + 7) / 2: the NaN has left the window


def test_an_inf_only_spoils_the_windows_that_hold_it():
    out = smooth([1.0, float("inf"), 3.0, 5.0, 7.0], 2)
    assert out[:3] == [1.0, math.inf, math.inf]
    assert out[3:] == [4.0, 6.0]


def test_finite_values_are_unchanged():
    assert smooth([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]
    assert smooth([2.0, 4.0, 6.0], 10) == [2.0, 3.0, 4.0]
