"""`orl` under torchrun with the test suite's verifier: a random base is never right, so the tests
accept every rollout except those of the prompts listed in ORL_TEST_REJECT (JSON), and updates happen.
Run as `torchrun ... tests/dist_worker.py train --recipe orl ...` (the arguments of `orl`)."""
import json
import os
import sys

import orl.train.orl as trainer
import orl.train.rcd as rcd
from orl.cli import main

REJECT = set(json.loads(os.environ.get("ORL_TEST_REJECT", "[]")))


def accepting(real):
    def collect(*args, **kw):
        rollouts = real(*args, **kw)
        for r in rollouts:
            r.verified = r.sample.prompt not in REJECT
        return rollouts
    return collect


trainer.collect = accepting(trainer.collect)
rcd.collect = accepting(rcd.collect)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
