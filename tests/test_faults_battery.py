"""benchmarks/fault_battery.py is a tool, not a test (it runs every case of docs/faults.md in a process of its own,
minutes); this checks only that its case list is well formed: names unique and usable with --only, an expected
exit code, a known check of the folder. Under a second, no case run."""

from __future__ import annotations

import re

import pytest

from benchmarks import fault_battery


def test_the_case_list_is_well_formed(capsys):
    cases = fault_battery.cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)) and len(cases) >= 100
    for c in cases:
        assert re.fullmatch(r"[a-z0-9_]+", c.name), c.name
        assert c.exit and all(isinstance(code, int) for code in c.exit), c.name
        assert c.folder in ("untouched", "whole", ""), c.name
        assert all(isinstance(s, str) and s for s in c.says), c.name
        assert callable(c.cmd) and c.limit_s > 0 and c.mem_gib > 0, c.name
        assert not c.ray or c.limit_s >= 120, c.name  # a Ray instance starts in tens of seconds on 2 cores
    groups = {c.group for c in cases}
    assert {"writer", "links", "endless", "diag", "resume", "disk", "storage", "values", "configs", "data",
            "payloads", "signals", "actors"} <= groups
    assert fault_battery.main(["--list", "--only", names[0]]) == 0
    assert capsys.readouterr().out.split()[1] == names[0]
    with pytest.raises(SystemExit):
        fault_battery.main(["--only", "no_such_case"])
