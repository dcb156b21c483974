"""Bundle sources laid out like the repo's (patches, evidence of two targets, benchmark) in a temp dir."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from builder.bundle import BundleSources, build_bundle
from builder.bundle.sign import sign_bundle
from builder.keys import generate_key_pair
from tests.evidence_fixtures import write_ledger


@pytest.fixture
def sources(tmp_path) -> BundleSources:
    return write_sources(tmp_path / "src")


def write_sources(src: Path) -> BundleSources:
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


class KeyPair:
    def __init__(self, folder: Path, name: str) -> None:
        self.private = folder / name
        self.public = folder / f"{name}.pub"
        self.id = generate_key_pair(private_path=self.private, public_path=self.public)


@pytest.fixture(scope="session")
def keys(tmp_path_factory) -> tuple[KeyPair, KeyPair]:
    """Two signing key pairs: the release's, and another one."""
    folder = tmp_path_factory.mktemp("keys")
    return KeyPair(folder, "release.key"), KeyPair(folder, "other.key")


@pytest.fixture(scope="session")
def signed_master(tmp_path_factory, keys) -> Path:
    """A gb10 bundle built once and signed with the release key; tests copy it (`signed`)."""
    root = tmp_path_factory.mktemp("signed")
    out = root / "dist" / "gb10"
    build_bundle(target="gb10", out=out, sources=write_sources(root / "src"), console=Console(quiet=True),
                 signing_key_id=keys[0].id)
    sign_bundle(out, key=keys[0].private)
    return out


@pytest.fixture
def signed(tmp_path, signed_master) -> Path:
    """A private copy of the signed bundle, in a folder named unlike the one it was signed in."""
    copy = tmp_path / "downloaded" / "qfn-release"
    shutil.copytree(signed_master, copy)
    return copy
