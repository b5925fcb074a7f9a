"""Shared test fixtures."""
import os

import pytest
import torch

# Under pytest-xdist (`make test` runs one worker per core) each worker is one of the machine's cores:
# a second torch thread per worker would only oversubscribe them. Subprocesses a test starts
# (torchrun, the CLI) set their own threads.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on a shared 2-core machine: thread sync costs more than the math. Modules opt in with
    `pytestmark = pytest.mark.usefixtures("one_thread")`; the thread count is restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
