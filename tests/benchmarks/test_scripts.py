"""Every benchmark script runs as `python -m benchmarks.PACKAGE.SCRIPT` from the repo root (its --help,
in a child), and the GPU steps of benchmarks/kernels/evidence.sh name modules and tests that exist.

Scripts that import the patch series' helpers (bundle/patches) by plain name get that folder on
PYTHONPATH, as evidence.sh gives it on the GPU host; the others run with no PYTHONPATH at all."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from builder.constants import REPO_ROOT

SERIES = REPO_ROOT / "bundle" / "patches"
#: Scripts --help cannot reach here, and why.
NOT_HERE = {
    "benchmarks.ple.probe": "runs inside the containers cpu_proof starts, on a plan file",
    "benchmarks.plan.vs_vllm": "imports vLLM, which the venv lacks (its docstring says how to run it)",
}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)


def _scripts() -> list[str]:
    """Modules of benchmarks/ (the engine harness aside) that run as __main__."""
    return sorted(_module(p) for p in (REPO_ROOT / "benchmarks").glob("*/*.py")
                  if p.parent.name != "engine" and 'if __name__ == "__main__":' in p.read_text())


def _top_level_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _needs_series(module: str) -> bool:
    """Whether importing ``module`` imports a series helper, directly or through another benchmark."""
    imports = _top_level_imports(REPO_ROOT / (module.replace(".", "/") + ".py"))
    if any((SERIES / f"{name}.py").is_file() for name in imports):
        return True
    return any(_needs_series(name) for name in imports if name.startswith("benchmarks.") and name.count(".") == 2)


def test_the_scripts_are_found():
    found = set(_scripts())
    assert {"benchmarks.kernels.grid", "benchmarks.ple.cpu_proof", "benchmarks.plan.vs_measured"} <= found
    assert set(NOT_HERE) <= found


@pytest.mark.parametrize("module", [m for m in _scripts() if m not in NOT_HERE])
def test_help_runs_from_the_repo_root(module):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if _needs_series(module):
        env["PYTHONPATH"] = str(SERIES)
    run = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("usage:"), run.stdout[:500]


def test_the_series_helpers_are_what_the_kernel_scripts_need_on_the_path():
    """The control of the PYTHONPATH rule: the grid takes the series, the report does not."""
    assert _needs_series("benchmarks.kernels.grid") and _needs_series("benchmarks.kernels.prepare_write")
    assert not _needs_series("benchmarks.kernels.grid_report")


def test_evidence_sh_names_modules_and_tests_that_exist():
    script = REPO_ROOT / "benchmarks/kernels/evidence.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    modules = set(re.findall(r"python -m (benchmarks(?:\.\w+)+)", text))
    tests = set(re.findall(r"\b(tests/[\w/]+\.py)\b", text))
    assert {"benchmarks.kernels.grid", "benchmarks.kernels.accuracy"} <= modules and "tests/gpu/test_qsa_int8.py" in tests
    missing = [m for m in modules if not (REPO_ROOT / (m.replace(".", "/") + ".py")).is_file()]
    missing += [t for t in tests if not (REPO_ROOT / t).is_file()]
    assert not missing, missing
