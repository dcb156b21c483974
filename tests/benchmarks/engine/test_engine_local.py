"""The local transport's refusals, with real interpreters in subprocesses: `run` names the option and the
fix before anything starts when --python has no vLLM, another vLLM, or no GPU to serve on."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks.engine.__main__ import main
from benchmarks.engine.errors import EngineHarnessError
from benchmarks.engine.transport.local import LocalTransport


def a_vllm(root: Path, version: str) -> Path:
    """A folder holding a package named vllm of `version` (what --pythonpath puts in front)."""
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return root


def refused(capsys, argv: list[str]) -> str:
    assert main(argv) == EngineHarnessError.exit_code
    return capsys.readouterr().err


def test_a_python_without_vllm_is_refused_naming_python_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    err = refused(capsys, ["run", "--out", str(out), "--python", sys.executable, "--state", str(tmp_path / "s")])
    assert f"--python {sys.executable} cannot import vllm: ModuleNotFoundError" in err
    assert "vllm==0.33.0" in err and "--pythonpath" in err  # the fix
    assert not out.exists() and not (tmp_path / "s").exists()


def test_a_python_that_cannot_run_is_refused(tmp_path, capsys):
    err = refused(capsys, ["run", "--out", str(tmp_path / "out"), "--python", str(tmp_path / "no-such-python")])
    assert "--python" in err and "cannot run it" in err


def test_another_vllm_version_is_refused_naming_the_version_found(tmp_path, capsys):
    old = a_vllm(tmp_path / "old", "0.32.0")
    err = refused(capsys, ["run", "--out", str(tmp_path / "out"), "--pythonpath", str(old)])
    assert f"imports vllm 0.32.0 from {old / 'vllm' / '__init__.py'}" in err and "vllm==0.33.0" in err


def test_without_nvidia_smi_the_gpu_is_named_missing(tmp_path, capsys, monkeypatch):
    """The right vLLM version, and a PATH without nvidia-smi."""
    right = a_vllm(tmp_path / "right", "0.33.0")
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    err = refused(capsys, ["run", "--out", str(tmp_path / "out"), "--pythonpath", str(right)])
    assert "no GPU here: nvidia-smi is not on PATH" in err and "prepare" in err


def test_a_torch_without_cuda_is_refused_naming_python(tmp_path, capsys, monkeypatch):
    """nvidia-smi answers (a driver is there) but --python's torch sees no GPU: this venv's CPU torch."""
    pytest.importorskip("torch")
    right = a_vllm(tmp_path / "right", "0.33.0")
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\nexit 0\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    err = refused(capsys, ["run", "--out", str(tmp_path / "out"), "--pythonpath", str(right)])
    assert f"--python {sys.executable}: torch.cuda.is_available() is False" in err
    assert "CUDA build of torch" in err


def test_an_out_folder_holding_files_is_refused_before_any_check(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.json").write_text("{}")
    err = refused(capsys, ["run", "--out", str(tmp_path / "out"), "--python", str(tmp_path / "no-such-python")])
    assert "--out" in err and "holds files already" in err


def test_the_servers_environment_puts_the_given_folders_first(tmp_path):
    right = a_vllm(tmp_path / "right", "0.33.0")
    t = LocalTransport(out=tmp_path / "out", state=tmp_path / "state", pythonpath=(right,))
    env = t.env()
    assert env["PYTHONPATH"].split(":")[0] == str(right)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "state" / "triton-cache")
