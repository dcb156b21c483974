"""The real 0.33.0 wheel: fetch + sha256, then the shipped series checks and applies cleanly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from builder.constants import ENGINE_QSA_DIR as QSA_DIR
from builder.constants import ENGINE_WHEEL_SHA256, PATCHES_DIR
from builder.patches.apply import FileStatus, apply_series, check_series
from builder.hashing import sha256_file
from builder.patches.series import load_series
from tests.conftest import copy_series_sources


def test_fetch_engine_verifies_the_pinned_wheel(engine_src):
    from builder.patches.engine import fetch_engine

    tree = fetch_engine()
    assert tree.wheel_sha256 == ENGINE_WHEEL_SHA256 == sha256_file(tree.wheel)
    assert not tree.unpacked  # second call reuses the unpacked sources
    assert (engine_src / QSA_DIR / "ops" / "qsa.py").is_file()


def test_header_shas_match_the_real_upstream_files(engine_src):
    for patch in load_series(PATCHES_DIR):
        assert patch.engine_version == "0.33.0"
        for entry in patch.files:
            upstream = engine_src / entry.path
            if entry.upstream_sha256 == "new":
                assert not upstream.exists()
            else:
                assert sha256_file(upstream) == entry.upstream_sha256, entry.path


def test_cli_check_passes_on_the_real_engine(engine_src):
    result = subprocess.run([sys.executable, "-m", "builder", "patches", "check", "--target", str(engine_src)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("applies cleanly") == sum(len(p.files) for p in load_series(PATCHES_DIR))


def test_applied_tree_reports_already_applied_and_compiles(patched_tree):
    report = check_series(target=patched_tree, patches_dir=PATCHES_DIR)
    assert {r.status for r in report.results} == {FileStatus.ALREADY}
    again = apply_series(target=patched_tree, patches_dir=PATCHES_DIR)
    assert again.applied == [] and len(again.compiled) == len(report.results)


def test_drifted_engine_fails_naming_file_and_hunk(engine_src, tmp_path):
    copy_series_sources(engine_src, tmp_path)
    target = tmp_path / QSA_DIR / "qsa.py"
    text = target.read_text()
    assert '"fp8_e4m3",\n    ]' in text
    target.write_text(text.replace('"fp8_e4m3",\n    ]', '"fp8_e4m3",\n        "fp8_e5m2",\n    ]', 1))
    result = subprocess.run([sys.executable, "-m", "builder", "patches", "apply", "--to", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 20
    assert "vllm/models/qwen4_exp/nvidia/qsa.py" in result.stderr and "hunk #" in result.stderr
    # Dry run first: nothing was written, not even the files that would apply.
    assert "_int8_to_biased_fp16" not in (tmp_path / QSA_DIR / "ops" / "qsa.py").read_text()
    assert not (tmp_path / QSA_DIR / "ops" / "qsa_kv_layout.py").exists()


def test_missing_file_fails(engine_src, tmp_path):
    copy_series_sources(engine_src, tmp_path)
    (tmp_path / QSA_DIR / "indexer_qsa.py").unlink()
    report = check_series(target=tmp_path, patches_dir=PATCHES_DIR)
    failed = [r for r in report.results if r.status == FileStatus.FAILS]
    assert [r.path for r in failed] == [str(QSA_DIR / "indexer_qsa.py")]
    assert "missing" in failed[0].detail


@pytest.mark.parametrize("arch", ["sm_121"])
def test_aot_compiles_every_production_config_within_shared_memory(patched_tree, arch, tmp_path):
    pytest.importorskip("triton")
    from builder.patches.aot import compile_qsa_kernels

    out = tmp_path / "aot.json"
    # int8 only keeps CI short; `builder patches aot` compiles all three cache dtypes.
    report = compile_qsa_kernels(engine_root=patched_tree, arch=arch, json_out=out, cache_dtypes=("int8",))
    assert out.is_file()
    assert {(c.num_query_heads, c.num_kv_heads) for c in report.configs} == {(24, 2), (12, 1)}
    assert all(c.cache_dtype == "int8" and 0 < c.shared_bytes <= 101_376 and c.registers > 0 for c in report.configs)


# Under the images' Triton 3.8.0 the one-warp 32-token int8 tiles keep one 8-byte stack slot
# at 255 registers. The regression this guards against spilled 240-296 B there and moved V
# through shared memory (evidence/kernels/triton38/aot-int8-spills.txt).
MAX_INT8_LOCAL_BYTES = 8


def _int8_local_bytes(tree) -> dict[tuple[int, int, int, int], int]:
    from builder.patches.aot import compile_qsa_kernels

    report = compile_qsa_kernels(engine_root=tree, arch="sm_90", cache_dtypes=("int8",))
    # Both tile kinds are compiled: the one-warp 32-token tile and a 128-token one.
    assert {(c.block_n, c.num_warps) for c in report.configs} >= {(32, 1), (128, 4)}
    return {(c.num_query_heads, c.block_n, c.num_warps, c.num_splits): c.local_bytes for c in report.configs}


def test_no_sm90_int8_tile_spills(patched_tree):
    pytest.importorskip("triton")
    local = _int8_local_bytes(patched_tree)
    assert {k: v for k, v in local.items() if v > MAX_INT8_LOCAL_BYTES} == {}
    assert {k: v for k, v in local.items() if k[1] >= 64 and v} == {}


# The V decode as one inline asm with two results (even and odd dims), the kernel's former
# form: Triton 3.8 keeps only the first result in the dot operand layout and moves the
# second through shared memory, and the one-warp tiles spill.
_TWO_RESULT_DECODE = """
@triton.jit
def _int8_pairs_both(tile):
    return tl.inline_asm_elementwise(
        asm=\"\"\"
        {
        .reg .b32 b0, b1, high;
        xor.b32 b0, $4, 0x80808080;
        xor.b32 b1, $5, 0x80808080;
        mov.b32 high, 0x64646464;
        prmt.b32 $0, b0, high, 0x4240;
        prmt.b32 $1, b1, high, 0x4240;
        prmt.b32 $2, b0, high, 0x4341;
        prmt.b32 $3, b1, high, 0x4341;
        }
        \"\"\",
        constraints="=r,=r,=r,=r,r,r",
        args=[tile],
        dtype=(tl.float16, tl.float16),
        is_pure=True,
        pack=4,
    )

"""


def test_the_spill_guard_catches_the_two_result_v_decode(patched_tree, tmp_path):
    pytest.importorskip("triton")
    import shutil

    tree = tmp_path / "two-result"
    shutil.copytree(patched_tree, tree)
    qsa = tree / QSA_DIR / "ops" / "qsa.py"
    text = qsa.read_text()
    for half in ("lo", "hi"):
        for odd, index in (("False", 0), ("True", 1)):
            call = f"_int8_pairs_to_biased_fp16(values_{half}, {odd})"
            assert text.count(call) == 1
            text = text.replace(call, f"_int8_pairs_both(values_{half})[{index}]")
    anchor = "@triton.jit\ndef _int8_pairs_to_biased_fp16("
    assert text.count(anchor) == 1
    qsa.write_text(text.replace(anchor, _TWO_RESULT_DECODE.lstrip() + "\n" + anchor))
    local = _int8_local_bytes(tree)
    # Every one-warp tile is caught (the table's 2-warp 64-token tiles spill too).
    assert {k for k, v in local.items() if v > MAX_INT8_LOCAL_BYTES} >= {k for k in local if k[1:3] == (32, 1)}


def test_aot_refuses_a_config_over_the_arch_limit(patched_tree, monkeypatch):
    pytest.importorskip("triton")
    from builder.errors import KernelFitError
    from builder.patches import aot

    monkeypatch.setitem(aot.ARCH_MAX_SHARED_BYTES, "sm_121", 20_000)
    with pytest.raises(KernelFitError, match="exceed 20000 B"):
        aot.compile_qsa_kernels(engine_root=patched_tree, arch="sm_121", cache_dtypes=("int8",))


def test_series_carries_ple_mmap_after_qsa_int8():
    patches = load_series(PATCHES_DIR)
    assert [p.name for p in patches] == ["qsa-int8", "ple-mmap"]
    ple = patches[1]
    paths = {f.path: f.upstream_sha256 for f in ple.files}
    assert paths["vllm/models/qwen4_exp/common/ple_mmap.py"] == "new"
    for path in ("vllm/config/engram.py", "vllm/models/qwen4_exp/common/ngram_embedding.py"):
        assert len(paths[path]) == 64


def test_patched_engine_has_the_mmap_config_and_class(patched_tree):
    engram = (patched_tree / "vllm/config/engram.py").read_text()
    assert "mmap_table: bool | None = None" in engram and "VLLM_PLE_MMAP_TABLE" in engram
    common = (patched_tree / "vllm/models/qwen4_exp/common/ngram_embedding.py").read_text()
    assert "class Qwen4ExpPLEMappedHostEmbedding(Qwen4ExpPLEPinnedHostEmbedding)" in common
    assert "host_embedding_class(" in (patched_tree / "vllm/models/qwen4_exp/nvidia/ngram_embedding.py").read_text()


def test_drifted_engram_config_fails_naming_the_ple_mmap_file(engine_src, tmp_path):
    """Control for the second patch: an upstream edit under one of its hunks is reported, per file."""
    copy_series_sources(engine_src, tmp_path)
    target = tmp_path / "vllm/config/engram.py"
    text = target.read_text()
    line = "    Always on for private tables on ROCm.\"\"\"\n"
    assert line in text
    target.write_text(text.replace(line, "    Always on for private tables on ROCm and XPU.\"\"\"\n", 1))
    report = check_series(target=tmp_path, patches_dir=PATCHES_DIR)
    failed = [(r.patch, r.path) for r in report.results if r.status == FileStatus.FAILS]
    assert failed == [("ple-mmap", "vllm/config/engram.py")]
    assert not report.ok
