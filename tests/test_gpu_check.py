"""benchmarks/gpu_check.py's `regions` stage, the parts that run anywhere: which learner code a launch belongs to,
kernel names cut to what tells them apart, and the stage itself on the CPU (leaf CPU ops standing in for kernels)."""

from __future__ import annotations

import re

from benchmarks import gpu_check as gc


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


def test_the_regions_stage_with_shapes_names_each_launch_with_the_tensors_it_read(tmp_path):
    """--shapes: launches of one op on tensors of different sizes are told apart (the replay batch's 1024 rows show
    in the Q losses), and the counts are the same as without it."""
    plain = gc.run_regions("cpu", None, "smoke", T=8, B=128, reps=1)["rows"][0]["regions"]
    shaped = gc.run_regions("cpu", None, "smoke", T=8, B=128, reps=1, shapes=True)["rows"][0]["regions"]
    assert {r: v["kernels"] for r, v in shaped.items()} == {r: v["kernels"] for r, v in plain.items()}
    names = [t["name"] for v in shaped.values() for t in v["top"]]
    assert all(re.fullmatch(r"aten::\w+ \[.*\]", n) for n in names), names
    assert any("1024" in t["name"] for t in shaped["_q_losses"]["top"]), shaped["_q_losses"]["top"]


def test_the_census_counts_the_captured_body_s_launches_and_pins_the_ones_removed(tmp_path):
    """census runs the graph's body on the CPU with the custom ops standing in for their kernels: each custom op
    counts once (its reference insides not at all), and the launches taken out of the update stay out: the main
    loss is one dot product, the backward writes each flat gradient with one concatenation (no zeroing, no add
    per parameter), the IQN's cosine frequencies and midpoint features are not remade, and the online encoder
    runs once with gradients, its output split (not sliced) between the rollout's states and the replay sample's,
    so that its gradient is one concatenation, not two zeroed copies of its full size added together."""
    report = gc.run_census(str(tmp_path / "c.json"), "smoke", T=8, B=32)
    assert (tmp_path / "c.json").exists() and gc.ops.backend().startswith("reference")
    regions = report["regions"]
    assert report["launches"] == sum(r["launches"] for r in regions.values()) > 50
    q_ops = regions["_q_losses"]["ops"]
    assert sum(c for k, c in q_ops.items() if k.startswith("foxhunt::iqn_head ")) == 2  # online and target
    assert not any(k.startswith("aten::") and "iqn_head" in k for k in q_ops)
    assert regions["_main_loss"]["launches"] <= 3
    backprop = regions["_backprop"]["ops"]
    n_flat = sum(p.numel() for p in _smoke_net_parameters())
    assert not any(k.startswith(("aten::zero_", "aten::fill_")) and f"[[{n_flat}]" in k for k in backprop)
    assert sum(c for k, c in backprop.items() if k.startswith("aten::cat") and k.endswith(f"[{n_flat}]]")) == 1
    encoded = (8 + 1) * 32 + 1024  # rows through the encoder: the rollout's (T + 1) x B states and q_batch 1024
    assert not any(k.startswith("aten::fill_") and f"[[{encoded}, " in k for k in backprop), backprop
    # pi and V_scalar as one product with the rollout's h (MainNet.pi_value), its logits sliced, not h: h's gradient
    # is one GEMM, with no zeroed [(T + 1) B, H] gradient for a slice of h and no add of two [(T + 1) B, H] ones
    from foxhunt_ray.presets import preset

    hidden = preset("smoke").hidden_dim
    for op in ("aten::fill_", "aten::zero_", "aten::add_", "aten::add", "aten::copy_"):
        assert not any(k.startswith(op + " ") and f"[{(8 + 1) * 32}, {hidden}]" in k for k in backprop), (op, backprop)
    # the IQN midpoints' mean folded into the output layer's weight: no [T B, 1, H] product for q_ens
    policy_ops = regions["_policy_losses"]["ops"]
    assert not any(k.startswith("aten::mul ") and f"[[{8 * 32}, 1, {hidden}]" in k for k in policy_ops), policy_ops
    body = [k for r in regions.values() for k in r["ops"]]
    assert not any(k.startswith("aten::arange") for k in body)
    assert sum(c for r in regions.values() for k, c in r["ops"].items() if k.startswith("aten::cos ")) == 2


def _smoke_net_parameters():
    from foxhunt_ray.presets import preset
    from learner.network import main_net

    obs_dim, n_actions = gc.market_shapes("smoke")
    return list(main_net(preset("smoke"), obs_dim, n_actions).parameters())
