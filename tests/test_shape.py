"""orl/eval/shape.py: the skeleton (numbers as '#') separates wrong lengths and alignment from wrong values."""
from orl.eval.shape import has_shape, shape_counts, skeleton


def test_skeleton_by_hand():
    assert skeleton("3,4,8") == "#,#,#"
    assert skeleton("3b4c18") == "#b#c#"
    assert skeleton("=3,e=-7") == "=#,e=#"
    assert has_shape("prog7x") and has_shape("long7h") and not has_shape("constr7") and not has_shape("long_mine")


def test_shape_counts_by_hand():
    samples = [("=3,e=7,f=5", "=3,e=7,f=5"),   # right
               ("=3,e=7,f=5", "=3,e=8,f=6"),   # right shape, one value of three right
               ("=3,e=7,f=5", "=3,e=7"),       # stops early: wrong shape
               ("=3,e=7,f=5", "=3,e=7,f=5,g=1"),  # runs on
               ("=3,e=7,f=5", "=3;e=7;f=5"),   # wrong separators
               ("=3,e=7,f=5", "=3,f=7,e=5")]   # wrong order
    assert shape_counts(samples) == (2, 4, 6)


def test_values_by_index_and_magnitude():
    from orl.eval.shape import values_by

    pairs = [("a9b99c100", "a9b98c100"),   # k=1 v=9 right; k=2 v=99 wrong; k=3 v=100 right
             ("a5b150", "a5b150"),          # k=1 right; k=2 v=150 right
             ("a5b150", "a5")]              # wrong shape: left out
    assert values_by(pairs, 100, 3) == {(False, False): (2, 3), (False, True): (1, 1), (True, True): (1, 1)}
