"""The self-check's runtime pieces, run as the image runs them (`python -m builder.selfcheck --only
runtime`) over a site tree that has or lacks each piece. The real image's run and its control are
in evidence/images/h200/selfcheck-runtime.txt."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from builder.constants import REPO_ROOT


def site(tmp_path, *, fa=("_vllm_fa2_C", "_vllm_fa3_C"), packages=("cutlass", "quack", "flashinfer")):
    root = tmp_path / "site"
    fa_dir = root / "vllm" / "vllm_flash_attn"
    fa_dir.mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (fa_dir / "__init__.py").write_text("")
    for name in fa:
        (fa_dir / f"{name}.abi3.so").write_bytes(b"\x7fELF")
    for name in packages:
        (root / name).mkdir()
        (root / name / "__init__.py").write_text("")
    return root


def selfcheck(tmp_path, root, *, arch: str, path: str | None = None) -> subprocess.CompletedProcess:
    facts = tmp_path / "target.json"
    facts.write_text(json.dumps({"name": "t", "gpu_arch": arch, "gpu_count": 1, "gpu_memory_gib": 80}))
    env = {"PATH": path if path is not None else os.environ["PATH"], "PYTHONPATH": f"{root}:{REPO_ROOT}"}
    return subprocess.run([sys.executable, "-m", "builder.selfcheck", "--only", "runtime", "--target-file", str(facts)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)


def test_every_piece_present_passes_those_checks(tmp_path):
    out = selfcheck(tmp_path, site(tmp_path), arch="sm_90").stdout
    assert "ok   FlashAttention extensions: _vllm_fa2_C.abi3.so, _vllm_fa3_C.abi3.so" in out
    assert "ok   CuTe DSL for CUDA graphs" in out and "ok   FlashInfer" in out
    assert "ok   quack for the CuTe-DSL router GEMM" in out


@pytest.mark.parametrize(("arch", "fa", "packages", "fail"), [
    ("sm_90", ("_vllm_fa2_C",), ("cutlass", "quack", "flashinfer"), "FAIL FlashAttention extensions: _vllm_fa3_C not in"),
    ("sm_80", (), ("cutlass", "quack", "flashinfer"), "FAIL FlashAttention extensions: _vllm_fa2_C not in"),
    ("sm_80", ("_vllm_fa2_C",), ("quack", "flashinfer"), "FAIL CuTe DSL for CUDA graphs: package cutlass is not installed"),
    ("sm_80", ("_vllm_fa2_C",), ("cutlass", "quack"), "FAIL FlashInfer: package flashinfer is not installed"),
    ("sm_90", ("_vllm_fa2_C", "_vllm_fa3_C"), ("cutlass", "flashinfer"),
     "FAIL quack for the CuTe-DSL router GEMM: package quack is not installed"),
])
def test_a_missing_piece_fails_the_self_check_by_name(tmp_path, arch, fa, packages, fail):
    r = selfcheck(tmp_path, site(tmp_path, fa=fa, packages=packages), arch=arch)
    assert fail in r.stdout and r.returncode == 1


def test_fa3_is_asked_for_only_where_vllm_loads_it(tmp_path):
    out = selfcheck(tmp_path, site(tmp_path, fa=("_vllm_fa2_C",)), arch="sm_80").stdout
    assert "ok   FlashAttention extensions: _vllm_fa2_C.abi3.so" in out


def test_no_c_compiler_fails_and_says_what_to_install(tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    r = selfcheck(tmp_path, site(tmp_path), arch="sm_90", path=str(bare))
    assert "FAIL C compiler for Triton: no C compiler" in r.stdout and "install gcc" in r.stdout
    assert r.returncode == 1
