"""--config FILE (TOML or JSON, a run's config.json too), --print-config and the config sections in --help: the
config from a file goes through the same overrides and checks as --set, and a --set wins over the file."""

from __future__ import annotations

import json
from pathlib import Path

from foxhunt_ray import driver

SMOKE = ["--preset", "smoke", "--serial", "--quiet"]


def printed(capsys, *flags: str, out: Path) -> tuple[int, dict | None, str]:
    code = driver.main([*SMOKE, "--out", str(out), "--print-config", *flags])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else None), captured.err


def test_a_toml_file_sets_fields_a_set_wins_and_print_config_starts_nothing(tmp_path, capsys):
    cfg = tmp_path / "mine.toml"
    cfg.write_text(
        "seed = 7\n[learner]\nlr = 0.002\nhidden_dim = 48\n[rollout]\nnum_envs = 6\n[kill]\nqpa_ema_min = -0.4\n"
    )
    code, doc, _ = printed(capsys, "--config", str(cfg), "--set", "learner.hidden_dim=40", out=tmp_path / "runs")
    assert code == 0
    run = doc["run"]
    assert run["seed"] == 7 and run["learner"]["lr"] == 0.002 and run["rollout"]["num_envs"] == 6
    assert run["kill"]["qpa_ema_min"] == -0.4
    assert run["learner"]["hidden_dim"] == 40  # --set wins over the file
    assert run["preset"] == "smoke" and doc["driver"]["steps"] >= 1
    assert not (tmp_path / "runs").exists()  # no run folder, no Ray


def test_a_runs_config_json_reproduces_its_config(tmp_path, capsys):
    assert driver.main([*SMOKE, "--out", str(tmp_path / "a"), "--steps", "3", "--set", "learner.lr=0.0007"]) == 0
    (config_json,) = (tmp_path / "a").glob("*/*/0/config.json")
    written = json.loads(config_json.read_text())["run"]
    capsys.readouterr()
    code, doc, _ = printed(capsys, "--config", str(config_json), out=tmp_path / "b")
    assert code == 0 and doc["run"] == written


def test_a_file_that_cannot_be_used_is_named_with_the_fix(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[learner\nlr = 1")
    code, _, err = printed(capsys, "--config", str(bad), out=tmp_path / "runs")
    assert code == 1 and f"--config={bad}: cannot read it" in err and "TOML" in err
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"learner": {"lrr": 1e-3}}))
    code, _, err = printed(capsys, "--config", str(unknown), out=tmp_path / "runs")
    assert code == 1 and "'learner.lrr' names no config field" in err and "learner.lr" in err
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"learner": {"lr": -1}}))
    code, _, err = printed(capsys, "--config", str(wrong), out=tmp_path / "runs")
    assert code == 1 and "learner.lr=-1.0 must be > 0" in err


def test_help_lists_the_config_sections_and_where_they_are_documented(capsys):
    try:
        driver.main(["--help"])
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    for section, home in (
        ("market", "lobsim_env/config.py"),
        ("learner", "learner/config.py"),
        ("rollout", "actors/config.py"),
        ("kill", "actors/kill_rules.py"),
    ):
        assert section in out and home in out
    assert "--config FILE" in out and "--print-config" in out


def test_a_resume_refuses_a_config_file(tmp_path, capsys):
    assert driver.main([*SMOKE, "--out", str(tmp_path / "a"), "--steps", "3"]) == 0
    (run_dir,) = (tmp_path / "a").glob("*/*/0")
    cfg = tmp_path / "c.toml"
    cfg.write_text("[learner]\nlr = 0.001\n")
    capsys.readouterr()
    assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", "6", "--config", str(cfg)]) == 1
    assert "drop ['--config']" in capsys.readouterr().err


def test_a_files_preset_settings_and_sizing_choose_the_start_and_are_checked(tmp_path, capsys):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"preset": "phase4_3", "settings": "seed", "sizing": "cpu"}))
    code = driver.main(["--out", str(tmp_path / "runs"), "--serial", "--config", str(cfg), "--print-config"])
    run = json.loads(capsys.readouterr().out)["run"]
    assert code == 0 and (run["preset"], run["settings"], run["sizing"]) == ("phase4_3", "seed", "cpu")
    assert run["learner"]["lr"] == 2.5e-4 and run["learner"]["hidden_dim"] == 128
    cfg.write_text(json.dumps({"settings": "fast"}))
    code = driver.main(["--out", str(tmp_path / "runs"), "--serial", "--config", str(cfg), "--print-config"])
    assert code == 1 and "settings='fast' is not one of ['learn', 'seed']" in capsys.readouterr().err
