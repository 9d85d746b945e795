"""benchmarks/gpu_check.py's `regions` stage, the parts that run anywhere: which learner code a launch belongs to,
kernel names cut to what tells them apart, and the stage itself on the CPU (leaf CPU ops standing in for kernels)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "gpu_check", Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
)
gc = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(gc)


def test_a_launch_belongs_to_the_innermost_region_running_when_it_starts():
    spans = [("_backward", 10.0, 50.0), ("_backprop", 12.0, 40.0), ("_q_losses", 60.0, 70.0)]
    items = [(11.0, "norm", 1.0), (20.0, "mm", 2.0), (20.5, "mm", 3.0), (40.0, "add", 1.0), (65.0, "gemm", 4.0),
             (80.0, "diag", 1.0), (5.0, "write", 2.0)]  # fmt: skip
    got = gc.attribute_to_regions(spans, items)
    assert got == {
        "_backward": {"norm": [1, 1.0]},
        "_backprop": {"mm": [2, 5.0], "add": [1, 1.0]},
        "_q_losses": {"gemm": [1, 4.0]},
        "the rest of update": {"diag": [1, 1.0], "write": [1, 2.0]},
    }


def test_short_kernel_names_keep_the_functor():
    name = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
        "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}, "
        "std::array<char*, 2ul> >(int, float, std::array<char*, 2ul>)"
    )
    assert gc.short_kernel_name(name).startswith("vectorized_elementwise_kernel<4, launch_clamp_scalar(")


def test_the_regions_stage_on_the_cpu_counts_every_part_of_the_update(tmp_path):
    before = gc.ops.backend()
    report = gc.run_regions("cpu", str(tmp_path / "r.json"), "smoke", T=8, B=128, reps=1)
    regions = report["rows"][0]["regions"]
    for method in ("_policy_losses", "_q_losses", "_main_loss", "_apply"):
        assert regions[method]["kernels"] > 0, (method, sorted(regions))
    assert (tmp_path / "r.json").exists() and gc.ops.backend() == before  # the backend mode put back
