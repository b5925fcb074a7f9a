"""The baseline loops now live in orl.eval.peers (`orl bench` uses them too); this module keeps the
benchmarks' `from baselines import ...` working."""
from orl.eval.peers import BaselineResult, PrefixCache, llada_reference, prefix_cache  # noqa: F401
