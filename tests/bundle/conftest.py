"""Bundle sources laid out like the repo's (patches, evidence of two targets, benchmark) in a temp dir."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from builder.bundle import BundleSources, build_bundle
from tests.evidence_fixtures import write_ledger


@pytest.fixture
def sources(tmp_path) -> BundleSources:
    src = tmp_path / "src"
    patches = src / "patches"
    (patches / "__pycache__").mkdir(parents=True)
    (patches / "series").write_text("qsa-int8.diff\n")
    (patches / "qsa-int8.diff").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    (patches / "qsa_reference.py").write_text("HEAD_DIM = 256\n")
    (patches / "__pycache__" / "qsa_reference.cpython-311.pyc").write_bytes(b"\0cache")
    evidence = src / "evidence"
    for target in ("gb10", "cmp170hx-x2"):
        (evidence / target).mkdir(parents=True)
        gate = {"gate": "golden_probes", "required": True, "verdict": "pass", "summary": f"3/3 on {target}",
                "created": "2026-11-20T10:00:00Z"}
        (evidence / target / "golden_probes.json").write_text(json.dumps(gate))
    (evidence / "kernels").mkdir()
    (evidence / "kernels" / "int8_gpu_tests-h200.log").write_text("62 passed\n")
    (evidence / "gb10" / "bench-decode.json").write_text(json.dumps({"workload": "decode", "mean_ttft_ms": 812.25}))
    (evidence / "gb10" / "notes-of-an-old-run.json").write_text("{}")  # in no claim: never shipped
    (evidence / "kernels" / "README.md").write_text("# Kernel runs on the H200\n")
    write_ledger(
        evidence,
        {"id": "gates", "targets": ["gb10"], "files": ["gb10/golden_probes.json", "gb10/bench-decode.json"]},
        {"id": "gates-cmp", "targets": ["cmp170hx-x2"], "files": ["cmp170hx-x2/golden_probes.json"]},
        {"id": "kernel-tests", "statement": "{passed} GPU tests pass", "targets": ["gb10", "cmp170hx-x2", "h200"],
         "files": ["kernels/int8_gpu_tests-h200.log"],
         "numbers": [{"name": "passed", "value": 62, "file": "kernels/int8_gpu_tests-h200.log", "pattern": r"(\d+) passed"}]},
    )
    bench = src / "benchmark_vllm.py"
    bench.write_text("print('bench')\n")
    return BundleSources(patches_dir=patches, evidence_root=evidence, benchmark=bench)


@pytest.fixture
def quiet() -> Console:
    return Console(quiet=True)


@pytest.fixture
def built(tmp_path, sources, quiet):
    """A gb10 bundle built from `sources`."""
    return build_bundle(target="gb10", out=tmp_path / "dist" / "gb10", sources=sources, console=quiet)
