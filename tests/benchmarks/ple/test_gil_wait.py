"""benchmarks.ple.gil_wait on this CPU: every case is measured with a native thread's callback, the
switch interval is restored, and the report names the intervals it compared. No timing is asserted."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks.ple import gil_wait


def test_every_case_is_measured_and_the_switch_interval_is_restored(tmp_path):
    before = sys.getswitchinterval()
    assert gil_wait.main(["--out", str(tmp_path), "--trials", "3"]) == 0
    assert sys.getswitchinterval() == before
    result = json.loads((tmp_path / "gil-wait.json").read_text())
    cases = {(c["interval"], c["main_thread"]): c for c in result["cases"]}
    assert set(cases) == {(name, m) for name, _ in gil_wait.INTERVALS for m in gil_wait.MAIN}
    assert all(c["trials"] == 3 and 0 < c["p50_us"] <= c["max_us"] for c in cases.values())
    md = (tmp_path / "gil-wait.md").read_text()
    assert all(f"{us} us ({name})" in md for name, us in gil_wait.INTERVALS)


def test_too_few_trials_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        gil_wait.main(["--out", str(tmp_path), "--trials", "1"])
    assert exc.value.code == 2
    assert "--trials must be 2 or more" in capsys.readouterr().err
    assert not (tmp_path / "gil-wait.json").exists()
