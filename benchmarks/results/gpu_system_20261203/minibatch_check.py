"""On the GPU: Learner.updates with minibatches (CUDA graph) against update() on each minibatch in turn."""
import dataclasses, sys, os, torch, numpy as np
sys.path.insert(0, os.getcwd())
from benchmarks.gpu_check import learner_batch
from foxhunt_ray.presets import preset
from learner.learner import Learner
cfg = dataclasses.replace(preset("phase4_3"), minibatch_envs=128, replay_min_size=1024)
a = Learner(cfg, obs_dim=32, n_actions=7, device="cuda", seed=0)
b = Learner(cfg, obs_dim=32, n_actions=7, device="cuda", seed=0)
worst = 0.0
for i in range(4):
    batch = {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in learner_batch(16, 512, 32, 7, seed=i, autoreset=True).items()}
    da = a.updates(batch)
    db = [b.update({k: (v[:, c:c + 128] if isinstance(v, np.ndarray) else v) for k, v in batch.items()}) for c in range(0, 512, 128)]
    for x, y in zip(da, db):
        for k in x:
            worst = max(worst, abs(x[k] - y[k]) / max(1e-6, abs(y[k])))
rel = ((a.main.flat - b.main.flat).norm() / b.main.flat.norm()).item()
print(f"MINIBATCH CHECK: {len(da)} steps/payload, {a.step} steps; params rel diff {rel:.2e}; worst diag rel diff {worst:.2e}; graph captures {a.graph.captures} / {b.graph.captures}")
print("MINIBATCH CHECK", "PASSED" if rel < 1e-4 and worst < 1e-3 else "FAILED")
