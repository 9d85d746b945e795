"""Fixtures shared by the test files."""

import os

import pytest
import torch


def pytest_collection_modifyitems(items):
    """The files with the most long tests (marked slow, or running on a Ray instance of the file's own) first, the
    rest after in their own order: the two test processes (pytest.ini_options' -n 2, one file at a time each) start
    on the long files and end on short ones, so neither waits idle for the other's last long file. A file's tests
    stay together and in order."""
    long_tests: dict = {}
    first: dict = {}
    for i, item in enumerate(items):
        first.setdefault(item.path, i)
        long = item.get_closest_marker("slow") is not None or "ray_local" in item.fixturenames
        long_tests[item.path] = long_tests.get(item.path, 0) + long
    items.sort(key=lambda item: (-long_tests[item.path], first[item.path]))


@pytest.fixture()
def one_torch_thread():
    """Smoke-sized ops gain nothing from intra-op threads and lose 10-25x when the CI cores are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def ray_local():
    """Ray in-process on 2 CPUs for one test module, shut down after it (every test stops what it started): a new
    instance of its own (never one running on the machine, e.g. another test process's), every port on 127.0.0.1
    as foxhunt_ray.local's _ray_init starts it (the switch in the environment reaches every process Ray starts; the
    constant covers a Ray already imported here); both restored after the module."""
    ray = pytest.importorskip("ray")
    from ray._private import ray_constants

    from foxhunt_ray.local import LOOPBACK_ENV

    before = os.environ.get(LOOPBACK_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_ENV] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        ray_constants.ENABLE_RAY_CLUSTER = before[1]
        if before[0] is None:
            os.environ.pop(LOOPBACK_ENV, None)
        else:
            os.environ[LOOPBACK_ENV] = before[0]
