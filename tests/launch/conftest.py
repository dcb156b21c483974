"""Rendered launch scripts of the shipped targets and a fork-preview variant, and a way to run them."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from builder.config import launch_plan, load_target, parse_config
from builder.config.ple import PLE_TABLE_DIR_ENV
from builder.constants import LAUNCH_ENV_DOC_NAME, LAUNCH_SCRIPT_NAME
from builder.launch import render_launch
from tests.conftest import on_fork_preview

SHIPPED = ["gb10", "cmp170hx-x2", "h200"]


def fork_preview(target_data) -> object:
    """gb10 on the fork preview engine, which reads PLE settings from VLLM_PLE_* env vars."""
    return parse_config(on_fork_preview(target_data("gb10")), source="gb10-fork-preview")


@pytest.fixture(params=[*SHIPPED, "gb10-fork-preview"])
def rendered(request, target_data, tmp_path):
    """(name, cfg, plan, script path, ENV.md text) for each target."""
    name = request.param
    cfg = fork_preview(target_data) if name == "gb10-fork-preview" else load_target(name)
    plan = launch_plan(cfg)
    files = render_launch(cfg=cfg, plan=plan)
    script = tmp_path / "run_qsa_int8kv.sh"
    script.write_text(files[LAUNCH_SCRIPT_NAME])
    return name, cfg, plan, script, files[LAUNCH_ENV_DOC_NAME]


@pytest.fixture
def model_dir(tmp_path) -> Path:
    d = tmp_path / "snapshot dir"  # a space: the script must quote it
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


def run_script(script: Path, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("MODEL_DIR", "DRY_RUN", PLE_TABLE_DIR_ENV)}
    return subprocess.run(
        ["bash", str(script), *args], env={**base, **env}, cwd=cwd, capture_output=True, text=True, timeout=30
    )


def launch_inputs(model_dir: Path) -> dict[str, str]:
    """Every input a shipped launch requires: the model dir, and a PLE table dir beside it (scripts
    that do not map the table ignore it)."""
    table_dir = model_dir.parent / "ple tables"
    table_dir.mkdir(exist_ok=True)
    return {"MODEL_DIR": str(model_dir), PLE_TABLE_DIR_ENV: str(table_dir)}


def dry_run(script: Path, model_dir: Path, *args: str, cwd: Path | None = None) -> tuple[list[list[str]], list[str]]:
    """The printed export lines (as words) and the printed command (as argv)."""
    proc = run_script(script, *args, cwd=cwd, DRY_RUN="1", **launch_inputs(model_dir))
    assert proc.returncode == 0, proc.stderr
    lines = [shlex.split(line) for line in proc.stdout.splitlines()]
    exports = [w for w in lines if w and w[0] == "export"]
    command = [w for w in lines if w and w[0] != "export"]
    assert len(command) == 1, proc.stdout
    return exports, command[0]
