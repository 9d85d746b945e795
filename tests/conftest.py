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


@pytest.fixture(scope="module")
def ray_local():
    """Ray in-process on 2 CPUs for one test module, shut down after it (every test stops what it started)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
