"""A setting is one field (foxhunt_ray.flags, foxhunt_ray.cli): a DriverConfig field with a Flag is a flag, a line of
--help, a `--set driver.FIELD=VALUE` key and a key of a --config file's [driver] table, with its type, default and
rule, spelled nowhere else; the entry points differ only in their row of ENTRY_DEFAULTS."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pytest

from foxhunt_ray import cli, driver, resolve, resume
from foxhunt_ray.flags import Flag
from foxhunt_ray.plan import DriverConfig
from lobsim_env.validation import Int

SMOKE = ["--preset", "smoke", "--serial", "--quiet"]


def printed(capsys, *flags: str, out: Path) -> tuple[int, dict | None, str]:
    code = driver.main([*SMOKE, "--out", str(out), "--print-config", *flags])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else None), captured.err


@pytest.fixture
def new_setting(monkeypatch):
    """DriverConfig with one more field, as a new setting is added: one line (and its docstring)."""

    @dataclass(kw_only=True, frozen=True)
    class WithProbe(DriverConfig):
        probe_every: Annotated[int, Int(ge=1), Flag("test only: updates between probes")] = 7
        """Test only: a new setting."""

    for module in (cli, resolve, resume):  # where the driver reads DriverConfig
        monkeypatch.setattr(module, "DriverConfig", WithProbe)
    monkeypatch.setenv("COLUMNS", "240")  # --help's lines unwrapped
    return WithProbe


def test_a_new_field_is_a_flag_a_help_line_a_set_key_and_a_config_key(new_setting, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        driver.main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "--probe-every PROBE_EVERY" in text and "test only: updates between probes (default 7)" in text
    out = tmp_path / "runs"
    assert printed(capsys, out=out)[1]["driver"]["probe_every"] == 7  # its default
    assert printed(capsys, "--probe-every", "3", out=out)[1]["driver"]["probe_every"] == 3  # the flag
    assert printed(capsys, "--set", "driver.probe_every=4", out=out)[1]["driver"]["probe_every"] == 4  # --set
    toml = tmp_path / "c.toml"
    toml.write_text("[driver]\nprobe_every = 5\n")
    assert printed(capsys, "--config", str(toml), out=out)[1]["driver"]["probe_every"] == 5  # --config
    both = ("--config", str(toml), "--set", "driver.probe_every=4")
    assert printed(capsys, *both, out=out)[1]["driver"]["probe_every"] == 4  # --set wins over the file
    assert printed(capsys, *both, "--probe-every", "3", out=out)[1]["driver"]["probe_every"] == 3  # the flag wins
    code, _, err = printed(capsys, "--probe-every", "0", out=out)  # its rule
    assert code == 1 and "driver.probe_every=0 must be an int >= 1" in err
    code, _, err = printed(capsys, "--set", 'driver.probe_every="x"', out=out)  # its type
    assert code == 1 and "driver.probe_every='x' must be int, got str" in err
    assert "--probe-every" in cli.resumable_flags()  # a resume may change it, as any driver flag


def test_max_payloads_waiting_is_one_field_with_the_entry_points_defaults_in_one_table(tmp_path, capsys):
    out = tmp_path / "runs"
    assert printed(capsys, out=out)[1]["driver"]["max_payloads_waiting"] == DriverConfig.max_payloads_waiting == 4
    assert printed(capsys, "--set", "driver.max_payloads_waiting=2", out=out)[1]["driver"]["max_payloads_waiting"] == 2
    gpu_host = cli.ENTRY_DEFAULTS["local_gpu_host"]
    assert gpu_host.max_payloads_waiting == 3 and cli.ENTRY_DEFAULTS["local"].max_payloads_waiting == 4
    args = driver.parse_args([*SMOKE, "--out", str(out)], "test", gpu_host)
    assert driver.resolve(args).driver.max_payloads_waiting == 3
    code, _, err = printed(capsys, "--set", "driver.max_payload_waiting=2", out=out)
    assert code == 1 and "override 'driver.max_payload_waiting' names no config field" in err
    assert "driver.max_payloads_waiting" in err


def test_an_entry_points_row_gives_its_defaults_and_what_is_asked_wins():
    local = cli.ENTRY_DEFAULTS["local"]
    assert resolve.entry_driver(local, {}) == {"steps": 6_000, "time_limit_s": 900.0, "rollout_workers": 1}
    assert "time_limit_s" not in resolve.entry_driver(local, {"steps": 50})  # a run given its steps: no budget
    assert resolve.entry_driver(local, {"time_limit_s": 60.0})["steps"] == 1_000_000  # the time is the budget
    assert resolve.entry_driver(local, {}, on_data=True)["keep_checkpoints"] == 0  # real days: every checkpoint
    assert "keep_checkpoints" not in resolve.entry_driver(cli.ENTRY_DEFAULTS["job"], {}, on_data=True)
    assert cli._driver_texts(local)["keep_checkpoints"] == "2; 0 with --data"  # its --help default


def test_a_resume_refuses_a_driver_set_and_names_the_flags_it_takes(tmp_path, capsys):
    assert driver.main([*SMOKE, "--out", str(tmp_path / "a"), "--steps", "3"]) == 0
    (run_dir,) = (tmp_path / "a").glob("*/*/0")
    capsys.readouterr()
    assert driver.main(["--resume", str(run_dir), "--set", "driver.steps=6", "--serial", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "drop ['--set']" in err and "--max-payloads-waiting" in err and "--fold" not in err.partition("only")[2]
