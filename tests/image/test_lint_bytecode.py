"""The lint venv's bytecode: compiled once, after the series, and a file that is not this Python's
syntax does not stop the rest."""

from __future__ import annotations

import sys

from builder.image.lintenv import BYTECODE_STAMP, ensure_bytecode


def test_the_site_is_compiled_once_and_a_file_of_another_python_is_passed_over(tmp_path):
    venv, site = tmp_path / "venv", tmp_path / "venv" / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("X = 1\n")
    (site / "pkg" / "newer.py").write_text("type Alias = int\n")  # 3.12 syntax; sorted before z.py
    (site / "pkg" / "z.py").write_text("Y = 2\n")
    logged = []
    ensure_bytecode(python=sys.executable, venv=venv, site=site, log=logged.append)
    cache = site / "pkg" / "__pycache__"
    tag = sys.implementation.cache_tag
    assert (cache / f"__init__.{tag}.pyc").is_file() and (cache / f"z.{tag}.pyc").is_file()
    assert (venv / BYTECODE_STAMP).is_file() and len(logged) == 1
    # Stamped: a second call compiles nothing.
    (cache / f"z.{tag}.pyc").unlink()
    ensure_bytecode(python=sys.executable, venv=venv, site=site, log=logged.append)
    assert not (cache / f"z.{tag}.pyc").exists() and len(logged) == 1
