"""The Ray actors' resource requests (foxhunt_ray.remote): every rollout actor the driver makes must fit beside the
learner actor, or the ones that do not fit stay pending for the whole run without a word."""

from __future__ import annotations

import pytest

from actors.config import RolloutConfig
from foxhunt_ray import remote

RAY_UNITS = 10_000  # Ray counts a resource in units of 0.0001


def units(x: float) -> int:
    return round(x * RAY_UNITS)


@pytest.mark.parametrize("policy_device", ["auto", "cuda"])
def test_gpu_shares_of_the_learner_and_every_rollout_actor_fit_in_one_gpu(policy_device):
    """Rounded to nearest, 0.5 / 12 = 0.0417 a rollout actor asked for 0.5004 GPU beside the learner's 0.5: on the
    16-core GPU host the twelfth rollout actor never started."""
    cfg = RolloutConfig(policy_device=policy_device)
    for n in range(1, 129):
        learner, worker = remote.gpu_shares(cfg, n, has_gpu=True)
        assert worker > 0 and units(learner) + n * units(worker) <= RAY_UNITS, (n, learner, worker)
    assert remote.gpu_shares(RolloutConfig(policy_device="cpu"), 12, has_gpu=True) == (1.0, 0.0)
    assert remote.gpu_shares(cfg, 12, has_gpu=False) == (0.0, 0.0)


def test_rollout_cpus_of_every_actor_fit_beside_the_learner(monkeypatch):
    """Rounded to nearest, one free CPU (a 2-core box) shared by 6 rollout actors asked 0.17 each: 1.02 in all."""
    for total in (2.0, 3.0, 4.0, 16.0, 64.0):
        monkeypatch.setattr(remote.ray, "cluster_resources", lambda total=total: {"CPU": total})
        for n in range(1, 20):
            cpus = remote.rollout_cpus(n)
            free = total - remote.LEARNER_CPUS
            if free / n >= 0.05:  # below that each actor asks for the floor of 0.05 (oversubscribed on purpose)
                assert n * units(cpus) <= units(free), (total, n, cpus)
            assert 0.05 <= cpus <= 1.0


@pytest.fixture
def ray_one_gpu():
    """Ray in-process with one (logical) GPU: Ray schedules by the numbers, no CUDA device is needed."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray instance of another test is running")
    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_starts_the_learner_and_every_rollout_actor_on_one_gpu(ray_one_gpu):
    """The learner's share and the GPU host's twelve rollout actors' shares, asked of a one-GPU instance as the
    driver asks them: every actor starts and answers (with the shares rounded to nearest, one stayed pending)."""
    ray = ray_one_gpu
    n = 12
    learner_gpus, worker_gpus = remote.gpu_shares(RolloutConfig(), n, has_gpu=True)

    class Probe:
        def ping(self) -> int:
            return 1

    actors = [ray.remote(num_cpus=0, num_gpus=learner_gpus)(Probe).remote()]
    actors += [ray.remote(num_cpus=0, num_gpus=worker_gpus)(Probe).remote() for _ in range(n)]
    ready, pending = ray.wait([a.ping.remote() for a in actors], num_returns=len(actors), timeout=120)
    assert len(ready) == len(actors) and not pending
