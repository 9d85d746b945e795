"""foxhunt_ray.report on real run folders: four smoke runs made by the driver (two done, one killed by the
non_finite rule, one by the qpa rule), plus hand-made folders for the edge cases (torn or corrupt lines, no
pnl, no dueling head, a long run)."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from actors.diag_file import read_diag, step_records
from foxhunt_ray import driver, report
from foxhunt_ray.report import MISSING, TABLE_KEYS, format_value, load_run, runs_table, table_rows, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOT_FILES = {"pnl_cum_usd.png", "qpa.png", "losses.png", "values.png", "throughput.png"}
NAN_STEP = 10  # --inject-nan-at: the non_finite rule fires at this step
QPA_KILL_STEP = 6  # kill.qpa_warmup_steps=5, qpa_ema_min=0.9: an untrained smoke qpa_ema (|.| < 0.5) is below it

RUNS = {
    "done0": ["--seed", "0", "--steps", "40"],
    "done1": ["--seed", "1", "--steps", "20"],
    "nan": ["--seed", "2", "--steps", "20", "--inject-nan-at", str(NAN_STEP)],
    "qpa": ["--seed", "3", "--steps", "40", "--set", "kill.qpa_ema_min=0.9", "--set", "kill.qpa_warmup_steps=5"],
}


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory) -> dict[str, Path]:
    """Each run in its own --out: the folder is OUT/<code_sha>/<name>/0 (globbed: a commit meanwhile moves code_sha)."""
    root = tmp_path_factory.mktemp("runs")
    dirs = {}
    for name, flags in RUNS.items():
        code = driver.main(["--preset", "smoke", "--serial", "--quiet", "--out", str(root / name), *flags])
        assert code == (3 if name in ("nan", "qpa") else 0), name
        (dirs[name],) = sorted((root / name).glob("*/*/0"))
    return dirs


@pytest.fixture()
def runs(run_dirs):
    loaded = [load_run(d) for d in run_dirs.values()]
    report.label_runs(loaded)
    return dict(zip(run_dirs, loaded, strict=True))


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("checkpoints"))
    return dst


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


def assert_png(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR" and len(data) > 5_000, path
    width, height = struct.unpack(">II", data[16:24])
    assert 400 <= width <= 4000 and 300 <= height <= 4000, (path, width, height)
    import matplotlib.image

    pixels = matplotlib.image.imread(path)  # decodes the whole file: a truncated PNG fails here
    assert pixels.shape[:2] == (height, width) and float(pixels[..., :3].std()) > 0.01, path  # not a blank image
    return width, height


def table_cells(table: str) -> list[dict[str, str]]:
    """The markdown table as one dict per row, header -> cell."""
    lines = table.strip().splitlines()
    split = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    head = split[0]
    assert set(lines[1]) <= set("|-:"), lines[1]
    assert all(len(row) == len(head) for row in split[2:]), table
    return [dict(zip(head, row, strict=True)) for row in split[2:]]


def test_load_run_reads_identity_status_and_kill(run_dirs, runs):
    done = runs["done0"]
    config = json.loads((run_dirs["done0"] / "config.json").read_text())
    assert (done.preset, done.seed, done.fold, done.status) == ("smoke", 0, 0, "done")
    assert done.code_sha == config["code_sha"] and done.kill is None and done.last_step == 40
    assert list(done.steps) == list(range(1, 41))
    assert done.label == "smoke seed 0" and runs["done1"].label == "smoke seed 1"
    nan, qpa = runs["nan"], runs["qpa"]
    assert (nan.status, nan.kill["rule"], nan.kill_step, nan.last_step) == ("killed", "non_finite", NAN_STEP, NAN_STEP)
    assert (qpa.status, qpa.kill["rule"], qpa.kill_step) == ("killed", "qpa_collapse", QPA_KILL_STEP)
    assert qpa.kill_config.qpa_ema_min == 0.9 and qpa.kill_config.qpa_warmup_steps == 5
    assert done.kill_config.qpa_ema_min == -0.3  # the smoke preset's default, read from config.json


def test_write_report_writes_valid_pngs_and_leaves_the_runs_alone(run_dirs, runs, tmp_path):
    before = {name: snapshot(d) for name, d in run_dirs.items()}
    log: list[str] = []
    written = write_report(list(runs.values()), tmp_path / "out", log=log.append)
    assert {p.name for p in written} == PLOT_FILES | {"report.md"} and written[-1].name == "report.md"
    for path in written[:-1]:
        assert_png(path)
        assert any(line.startswith(f"wrote {path}") for line in log), log  # one progress line per plot
    md = (tmp_path / "out" / "report.md").read_text()
    assert all(f"]({name})" in md for name in PLOT_FILES)
    assert runs_table(list(runs.values())) in md
    assert {name: snapshot(d) for name, d in run_dirs.items()} == before  # never writes into a run folder


def test_every_panel_marks_the_kills_and_qpa_shows_each_threshold(runs):
    order = list(runs.values())
    for name, (build, _) in report.PLOTS.items():
        fig = build(order)
        if name == "episode_return_mean.png":  # runs on an env other than the market only
            continue
        assert fig is not None, name
        for ax in [a for a in fig.axes if a.get_visible()]:
            texts = {t.get_text() for t in ax.texts}
            assert f"kill: non_finite @ {NAN_STEP}" in texts, (name, ax.get_title(), texts)
            assert f"kill: qpa_collapse @ {QPA_KILL_STEP}" in texts, (name, ax.get_title(), texts)
            kill_lines = [ln for ln in ax.lines if list(ln.get_xdata()) in ([NAN_STEP] * 2, [QPA_KILL_STEP] * 2)]
            assert len(kill_lines) == 2, (name, ax.get_title())
    (ax,) = report.plot_qpa(order).axes
    labels = {ln.get_label(): ln for ln in ax.lines}
    strict = labels["kill: qpa_ema < 0.9 (smoke seed 3)"]
    assert list(strict.get_ydata()) == [0.9, 0.9]
    assert list(labels["kill: qpa_ema < -0.3 (smoke seed 0, smoke seed 1, smoke seed 2)"].get_ydata()) == [-0.3, -0.3]
    assert list(labels["qpa warm-up ends: step 5 (smoke seed 3)"].get_xdata()) == [5, 5]


def test_table_has_one_row_per_run_and_shows_each_kill(runs):
    order = list(runs.values())
    rows = table_cells(runs_table(order))
    assert [r["run"] for r in rows] == [r.label for r in order]
    by = {r["run"]: r for r in rows}
    assert by["smoke seed 0"]["status"] == "✅ done" and by["smoke seed 1"]["status"] == "✅ done"
    assert by["smoke seed 2"]["status"].startswith(f"❌ non_finite step {NAN_STEP}: grad_norm/")
    qpa_ema = runs["qpa"].kill["values"]["qpa_ema"]
    assert by["smoke seed 3"]["status"] == f"❌ qpa_collapse step {QPA_KILL_STEP}: qpa_ema={qpa_ema:+.3f} < 0.9"
    short = report.short_sha(order[0].code_sha)
    assert short.startswith(order[0].code_sha[:9]) and len(short) <= len("123456789-dirty")
    assert all(r["preset"] == "smoke" and r["code_sha"] == short for r in rows)
    assert [r["last step"] for r in rows] == ["40", "20", str(NAN_STEP), str(QPA_KILL_STEP)]


def test_default_steps_are_fractions_of_the_shortest_run(runs):
    order = list(runs.values())
    assert report.default_steps(order) == [2, 3, 6]  # the qpa run ends at 6: 25 %, 50 %, 100 %
    head = table_cells(runs_table(order))[0].keys()
    assert [h for h in head if h.startswith("qpa_ema@")] == ["qpa_ema@2", "qpa_ema@3", "qpa_ema@6"]


def test_values_at_the_chosen_steps_are_the_diag_lines_values(run_dirs, runs):
    order = list(runs.values())
    steps = [5, 10, 20]
    rows = table_rows(order, steps)
    cells = table_cells(runs_table(order, steps))
    checked = 0
    for name, row, cell in zip(runs, rows, cells, strict=True):
        lines = {r["step"]: r for r in step_records(read_diag(run_dirs[name] / "diag.jsonl"))}
        for key in TABLE_KEYS:
            for s in steps:
                want = lines[s][key] if s in lines else None
                assert row["values"][(key, s)] == want, (name, key, s)
                assert cell[f"{key}@{s}"] == format_value(key, want), (name, key, s)
                checked += want is not None
    assert checked == len(TABLE_KEYS) * (3 + 3 + 2 + 1)  # steps reached: done0 3, done1 3, nan 2 (to 10), qpa 1 (to 6)
    assert cells[3]["qpa_ema@10"] == MISSING  # the qpa run was killed at 6


def test_evaluation_json_adds_held_out_columns(run_dirs, tmp_path):
    with_eval = copy_run(run_dirs["done0"], tmp_path / "e" / "0")
    evaluation = {
        "checkpoint_step": 40,
        "market": "synthetic",
        "policies": {"agent": {"pnl_usd_mean": 1234.4}, "oracle": {"pnl_usd_mean": 4937.6}},
        "oracle_fraction": 0.25,
    }
    (with_eval / "evaluation.json").write_text(json.dumps(evaluation))
    runs = [load_run(with_eval), load_run(run_dirs["done1"])]
    report.label_runs(runs)
    ev, plain = table_cells(runs_table(runs))
    assert (ev[report.SYNTHETIC_PNL], ev["oracle fraction"], ev["eval ckpt"]) == ("$1,234", "0.250", "40")
    assert (plain[report.SYNTHETIC_PNL], plain["oracle fraction"]) == (MISSING, MISSING)
    assert report.SYNTHETIC_PNL not in runs_table([load_run(run_dirs["done1"])])  # no evaluation: no columns
    (row,) = table_cells(report.evaluations_table(runs).partition("\n\n")[0])
    assert (row["market"], row["oracle PnL"], row["oracle fraction"]) == ("synthetic", "$4,938", "0.250")
    assert row["caveat"] == ""
    assert report.evaluations_table([runs[1]]) == ""


def test_an_old_run_folder_whose_evaluation_json_is_a_lobster_day(run_dirs, tmp_path):
    """Older code's `evaluate --lobster` overwrote evaluation.json with a LOBSTER day ('lobster:<file>'): the report
    keeps that figure out of the synthetic held-out column and tables it as a LOBSTER day without an oracle."""
    old = copy_run(run_dirs["done0"], tmp_path / "old" / "0")
    evaluation = {
        "checkpoint_step": 0,
        "market": "lobster:LOBSTER_SampleFile_AMZN_2012-06-21_1.zip",
        "fold": 0,
        "held_out": True,
        "episodes": 64,
        "horizon": 1000,
        "policies": {
            "agent": {"pnl_usd_mean": 760.2, "pnl_usd_sem": 90.0, "sharpe": 2.17},
            "flat": {"pnl_usd_mean": 0},
        },
        "oracle_fraction": None,
    }
    (old / "evaluation.json").write_text(json.dumps(evaluation))
    synthetic = copy_run(run_dirs["done1"], tmp_path / "syn" / "0")
    (synthetic / "evaluation.json").write_text(
        json.dumps({"checkpoint_step": 20, "market": "synthetic", "policies": {"agent": {"pnl_usd_mean": -5.0}}})
    )
    runs = [load_run(old), load_run(synthetic)]
    report.label_runs(runs)
    assert runs[0].evaluation is None and [e.market for e in runs[0].evaluations] == ["lobster"]
    lobster_run, synthetic_run = table_cells(runs_table(runs))
    assert lobster_run[report.SYNTHETIC_PNL] == MISSING and synthetic_run[report.SYNTHETIC_PNL] == "$-5"
    table, _, notes = report.evaluations_table(runs).partition("\n\n")
    day, syn = table_cells(table)
    assert (day["market"], day["fold / day"], day["agent PnL ± sem"], day["agent sharpe"]) == (
        "LOBSTER (real day)",
        "AMZN 2012-06-21",
        "$760 ± 90",
        "2.170",
    )
    assert day["oracle PnL"] == day["oracle fraction"] == "no oracle" and day["caveat"].startswith("⚠ no oracle")
    assert syn["market"] == "synthetic"
    assert "not comparable" in notes and "one day" in notes and "out of the training distribution" in notes


def test_cli_prints_progress_and_the_table(run_dirs, tmp_path, capsys):
    out = tmp_path / "rep"
    code = report.main([*map(str, run_dirs.values()), "--out", str(out), "--steps", "10,5"])
    stdout = capsys.readouterr().out
    assert code == 0
    for i, d in enumerate(run_dirs.values(), start=1):
        assert f"loaded run {i}/4 {d}:" in stdout
    for name in PLOT_FILES:
        assert f"wrote {out / name}" in stdout
    table = runs_table([load_run(d) for d in run_dirs.values()], [5, 10])
    assert table in stdout and table in (out / "report.md").read_text()
    assert f"report {out / 'report.md'}" in stdout


def test_default_out_and_a_torn_last_line(run_dirs, tmp_path, monkeypatch, capsys):
    torn = copy_run(run_dirs["done0"], tmp_path / "torn" / "0")
    (torn / "summary.json").unlink()  # a crashed run: no summary, half a line at the end
    with open(torn / "diag.jsonl", "a") as f:
        f.write('{"step": 41, "qpa": 0.')
    monkeypatch.chdir(tmp_path)
    assert report.main([str(torn)]) == 0
    stdout = capsys.readouterr().out
    assert "40 steps to 40, running; a partial last line skipped" in stdout
    (out,) = (tmp_path / "reports").iterdir()  # reports/<timestamp>/
    assert {p.name for p in out.iterdir()} == PLOT_FILES | {"report.md"}
    assert "… running (no summary.json; last step 40)" in (out / "report.md").read_text()


def test_bad_inputs_exit_1_naming_the_path_and_the_fix(run_dirs, tmp_path, capsys):
    def fails(*argv: str) -> str:
        assert report.main(list(argv)) == 1, argv
        return capsys.readouterr().err

    missing = tmp_path / "nope"
    err = fails(str(missing))
    assert f"run folder {missing} does not exist" in err and "pass a run folder" in err
    root = run_dirs["done0"].parents[2]  # the --out root: OUT/<code_sha>/<name>/0 lies below it
    err = fails(str(root))
    assert f"{root} has no diag.jsonl" in err and str(run_dirs["done0"]) in err
    corrupt = copy_run(run_dirs["done0"], tmp_path / "corrupt" / "0")
    lines = (corrupt / "diag.jsonl").read_text().splitlines(keepends=True)
    lines[2] = '{"step": 3, "qpa": \n'
    (corrupt / "diag.jsonl").write_text("".join(lines))
    err = fails(str(corrupt))
    assert f"{corrupt / 'diag.jsonl'}:3: not valid JSON" in err
    before = snapshot(run_dirs["done1"])
    err = fails(str(run_dirs["done0"]), "--out", str(run_dirs["done1"]))
    assert f"--out {run_dirs['done1']} is a run folder" in err
    assert snapshot(run_dirs["done1"]) == before
    assert "--steps '0,x' must be learner steps >= 1" in fails(str(run_dirs["done0"]), "--steps", "0,x")
    bad_eval = copy_run(run_dirs["done1"], tmp_path / "badeval" / "0")
    (bad_eval / "evaluation.json").write_text("{not json")
    err = fails(str(bad_eval))
    assert f"{bad_eval / 'evaluation.json'}: not a readable evaluation record" in err
    assert "python -m foxhunt_ray.evaluate" in err
    (bad_eval / "evaluation.json").unlink()
    (bad_eval / "evaluations").mkdir()
    (bad_eval / "evaluations" / "synthetic-fold0.json").write_text(json.dumps({"policies": {"agent": 3}}))
    before = snapshot(bad_eval)
    err = fails(str(bad_eval))
    assert f"{bad_eval / 'evaluations' / 'synthetic-fold0.json'}: 'policies' must be an object" in err
    assert "move the file out of" in err and snapshot(bad_eval) == before


def test_same_preset_and_seed_get_told_apart(run_dirs, tmp_path):
    other = copy_run(run_dirs["done0"], tmp_path / "again" / "0")
    runs = [load_run(run_dirs["done0"]), load_run(other)]
    report.label_runs(runs)
    assert runs[0].label != runs[1].label and all(r.label.startswith("smoke seed 0 ") for r in runs)
    twice = [load_run(other), load_run(other)]
    report.label_runs(twice)
    assert [r.label for r in twice] == ["smoke seed 0 #1", "smoke seed 0 #2"]


def fake_run(folder: Path, n: int) -> Path:
    """A run folder without config.json or summary.json whose lines lack pnl_cum_usd and whose dueling head is
    off (v_dq_mean and l_dueling 0): a non-trading env, a plan_a_v2-like learner."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    with open(folder / "diag.jsonl", "w") as f:
        for s in range(1, n + 1):
            rec = {"step": s, "time": 1000.0 + s, "preset": "plan_a_v2", "qpa": float(rng.normal(0.3, 0.1))}
            rec |= {"qpa_ema": 0.3, "l_c51": 2.0 / s, "l_iqn": 1.0, "l_pi": -0.01, "l_v": 5.0, "l_distill": 0.1}
            rec |= {"l_dueling": 0.0, "v_dq_mean": 0.0, "v_scalar_mean": 0.5, "updates_per_s": 10.0}
            f.write(json.dumps(rec) + "\n")
    return folder


def test_missing_keys_are_skipped_and_long_runs_are_binned(tmp_path):
    run = load_run(fake_run(tmp_path / "fake" / "0", 6000))
    log: list[str] = []
    written = write_report([run], tmp_path / "out", max_points=500, log=log.append)
    assert {p.name for p in written} == PLOT_FILES - {"pnl_cum_usd.png"} | {"report.md"}
    assert any(line.startswith("skipped pnl_cum_usd.png: no run logs pnl_cum_usd") for line in log)
    for path in written[:-1]:
        assert_png(path)
    fig = report.plot_losses([run], max_points=500)
    panels = {ax.get_title(): ax for ax in fig.axes}
    assert [t.get_text() for t in panels["l_dueling"].texts] == ["no run trains l_dueling (missing or 0 throughout)"]
    assert panels["l_c51"].get_yscale() == "log" and panels["l_pi"].get_yscale() == "linear"
    assert max(len(ln.get_xdata()) for ax in fig.axes for ln in ax.lines) <= 500
    labels = [ln.get_label() for ln in report.plot_values([run]).axes[0].lines]
    assert labels == ["plan_a_v2 V_scalar (no dueling head)"]
    (row,) = table_cells(runs_table([run], [100]))
    assert row["pnl_cum_usd@100"] == MISSING and row["l_dueling@100"] == "0" and row["l_c51@100"] == "0.02"


def test_downsample_keeps_the_ends_and_the_bin_means():
    x = np.arange(1, 10_001)
    y = np.where(x % 2 == 0, 1.0, 3.0)  # alternating: every even-sized bin averages to 2
    y[5000:5100] = np.nan
    xs, ys = report.downsample(x, y, 101)
    assert len(xs) == len(ys) == 101
    assert (xs[0], ys[0], xs[-1], ys[-1]) == (1, 3.0, 10_000, 1.0)
    assert np.all(np.diff(xs) > 0) and np.all(np.isfinite(ys))  # a bin with some NaN keeps the finite mean
    assert np.allclose(ys[1:-1], 2.0, atol=0.05)
    same_x, same_y = report.downsample(x[:50], y[:50], 101)
    assert np.array_equal(same_x, x[:50]) and np.array_equal(same_y, y[:50], equal_nan=True)
