"""Shared test fixtures."""
import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on a shared 2-core machine: thread sync costs more than the math. Modules opt in with
    `pytestmark = pytest.mark.usefixtures("one_thread")`; the thread count is restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
