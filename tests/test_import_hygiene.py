"""No folder of the tree, and no folder a test puts on sys.path, may shadow an installed package.

transformers imports `kernels` whenever that distribution is installed; one test had put a folder
holding a `kernels.py` on sys.path, and every later test in the process that converted a model
failed. Four guards: the tree's script folders take no installed name, no test edits sys.path, no
benchmark or GPU suite does either, and conftest fails the test after which a shadowing folder is on
sys.path (shown here on a mutant)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from builder.constants import REPO_ROOT
from tests.shadowing import installed_import_names, shadowed, top_level_names

#: What edits the module search path from inside a process.
SYS_PATH_EDIT = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend)\b|\[[^\]]*\]\s*=|\+=)|site\.addsitedir")


def _tracked(pattern: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", "--", pattern], cwd=REPO_ROOT, capture_output=True, check=True)
    return [REPO_ROOT / p for p in out.stdout.decode().split("\0") if p]


def test_no_test_edits_sys_path():
    """The mutants below are written by this file; every other test imports by package name."""
    edits = [f"{f.relative_to(REPO_ROOT)}:{n}: {line.strip()}"
             for f in _tracked("tests/*.py") if f.name != Path(__file__).name
             for n, line in enumerate(f.read_text().splitlines(), 1) if SYS_PATH_EDIT.search(line)]
    assert not edits, "tests edit sys.path (import by package name instead): " + "; ".join(edits)


#: Where a search-path edit is allowed, and why: the chunked transport asks a throwaway interpreter what a
#: wheel's .pth file adds (nvidia-cutlass-dsl's runs an import line); its own path stays as it was.
RUNS_SITE_IN_A_CHILD = {"benchmarks/engine/transport/chunked.py"}


def test_no_benchmark_and_no_gpu_suite_edits_sys_path():
    """Benchmarks run as `python -m benchmarks.PACKAGE.SCRIPT` from the repo root and import each other as
    the package; the GPU suites (tests/gpu/) run under pytest's pythonpath. Both find the series'
    helpers (bundle/patches) by plain name on the path they are given, never by editing it."""
    files = [f for f in _tracked("benchmarks/*") + _tracked("tests/gpu/*") if f.suffix in (".py", ".sh")]
    assert any(f.parent.name == "kernels" for f in files) and any(f.parent.name == "gpu" for f in files)
    edits = [f"{rel}:{n}: {line.strip()}" for f in files
             if (rel := f.relative_to(REPO_ROOT).as_posix()) not in RUNS_SITE_IN_A_CHILD
             for n, line in enumerate(f.read_text().splitlines(), 1) if SYS_PATH_EDIT.search(line)]
    assert not edits, "benchmarks or GPU suites edit sys.path (import by package name, or set PYTHONPATH): " + "; ".join(edits)


def test_no_folder_of_the_tree_shadows_an_installed_distribution():
    """Each folder holding modules outside a package is sys.path[0] when one of its scripts runs
    (and pytest's or the config's path for tests), so its module names must not be installed ones."""
    folders = {REPO_ROOT} | {f.parent for f in _tracked("*.py") if not (f.parent / "__init__.py").is_file()}
    found = {str(d.relative_to(REPO_ROOT)): names for d in sorted(folders) if (names := shadowed(d))}
    assert not found, f"folders whose modules shadow installed distributions (rename or move into a package): {found}"


def test_the_check_sees_modules_and_regular_packages_but_not_namespace_folders(tmp_path):
    taken = "kernels" if "kernels" in installed_import_names() else sorted(installed_import_names())[0]
    (tmp_path / f"{taken}.py").write_text("")
    (tmp_path / "namespace_only").mkdir()
    (tmp_path / "regular").mkdir()
    (tmp_path / "regular" / "__init__.py").write_text("")
    assert top_level_names(tmp_path) == {taken, "regular"}
    assert taken in shadowed(tmp_path)
    (tmp_path / f"{taken}.py").unlink()
    (tmp_path / taken).mkdir()  # a folder of that name without __init__.py never wins over the installed one
    assert shadowed(tmp_path) == {}


def _run_mutant(tmp_path: Path, body: str, *, pythonpath: tuple[Path, ...] = ()) -> subprocess.CompletedProcess:
    """A test file run by pytest with this suite's conftest guard, in a child process."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        "from tests.conftest import _no_folder_on_sys_path_shadows_an_installed_distribution  # noqa: F401\n")
    (suite / "test_mutant.py").write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite), "-c", "/dev/null", str(suite)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(map(str, (*pythonpath, REPO_ROOT)))})


def test_the_guard_fails_a_test_that_puts_a_folder_with_kernels_py_on_the_path(tmp_path):
    taken = "kernels" if "kernels" in installed_import_names() else sorted(installed_import_names())[0]
    folder = tmp_path / "archived"
    folder.mkdir()
    (folder / f"{taken}.py").write_text("")
    mutant = f"""
        import sys
        def test_puts_the_folder_first():
            sys.path.insert(0, {str(folder)!r})
        def test_after_it():
            pass
    """
    run = _run_mutant(tmp_path, mutant)
    assert run.returncode != 0, run.stdout
    assert "ERROR at teardown of test_puts_the_folder_first" in run.stdout, run.stdout
    assert f"{folder}/{taken} shadows the installed" in run.stdout
    # The control: the same folder without the shadowing module passes.
    (folder / f"{taken}.py").rename(folder / "not_installed_anywhere_qfn.py")
    (tmp_path / "control").mkdir()
    control = _run_mutant(tmp_path / "control", mutant)
    assert control.returncode == 0, control.stdout


def test_a_folder_the_caller_names_in_pythonpath_is_their_choice(tmp_path):
    """A GPU host runs the suites with a newer Triton first on PYTHONPATH, over its own install: the
    guard leaves what the caller set alone and still fails a test that puts the same folder there."""
    taken = "kernels" if "kernels" in installed_import_names() else sorted(installed_import_names())[0]
    folder = tmp_path / "newer"
    folder.mkdir()
    (folder / f"{taken}.py").write_text("")
    run = _run_mutant(tmp_path, "def test_imports_nothing():\n    pass\n", pythonpath=(folder,))
    assert run.returncode == 0, run.stdout
    inserted = f"""
        import sys
        def test_puts_it_first():
            sys.path.insert(0, {str(folder)!r})
    """
    (tmp_path / "control").mkdir()
    control = _run_mutant(tmp_path / "control", inserted)
    assert control.returncode != 0 and "shadows the installed" in control.stdout, control.stdout
