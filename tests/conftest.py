"""Fixtures shared by the test files."""

import pytest
import torch


@pytest.fixture()
def one_torch_thread():
    """Smoke-sized ops gain nothing from intra-op threads and lose 10-25x when the CI cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
