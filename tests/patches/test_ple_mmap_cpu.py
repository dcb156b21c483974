"""The ple-mmap patch on CPU, through the patched engine's own PLE classes, in containers.

The same plans as benchmarks/ple/cpu_proof.py (which writes evidence/ple/cpu.*), at CI size:
a bf16 table 1.5x a 1 GiB container limit (the evidence run uses 4.5x; here the table is written
twice, checkpoint and file, on 2 cores and a shared disk, so CI keeps it small), where upstream's resident table is OOM-killed
(the control) and the memory-mapped table loads and answers every lookup bit for bit, at TP1 and
TP2, in place and from a table file built under the limit; and small checkpoints for table-file
damage (a flipped byte, a truncation: detected and rebuilt), a rewritten checkpoint, fp8 and nvfp4.
Unlike the evidence run, the big checkpoint is written by a container of its own
(cpu_proof.limited_plans_apart says why: the control's OOM kill otherwise waits out minutes of
page-cache thrashing).
"""

from __future__ import annotations

import shutil

import pytest

from benchmarks.ple import cpu_proof

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LIMIT_MIB = 1024
MEMORY = f"{LIMIT_MIB}m"
TABLE_GIB = 1.5 * LIMIT_MIB / 1024
# checkpoint + the f16 table file built from it, plus slack for the small files
DISK_NEED_GIB = 2 * TABLE_GIB + 0.5


@pytest.fixture(scope="module")
def ple_env(base_image):
    return cpu_proof.engine_env()


@pytest.fixture
def work(tmp_path):
    """Scratch for checkpoints and table files (GBs): removed at once, not kept by pytest."""
    free_gib = shutil.disk_usage(tmp_path).free / 2**30
    if free_gib < DISK_NEED_GIB:
        pytest.fail(f"{tmp_path} has {free_gib:.1f} GiB free; the PLE CPU proof needs {DISK_NEED_GIB:.1f} GiB: free disk or set TMPDIR elsewhere")
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


def _steps(run: dict) -> dict[str, dict]:
    return {s["name"]: s for s in run["steps"]}


def test_resident_table_is_oom_killed_and_the_mapped_table_loads_under_the_limit(ple_env, work):
    write_plan, load_plan = cpu_proof.limited_plans_apart(table_gib=TABLE_GIB)
    written = cpu_proof.run_plan(env=ple_env, plan=write_plan, work=work, memory=None)
    assert written["passed"], written["log_tail"]
    run = cpu_proof.run_plan(env=ple_env, plan=load_plan, work=work, memory=MEMORY)
    steps = _steps(run)
    assert run["passed"], run["log_tail"]
    table = _steps(written)["write bf16 checkpoint"]["checkpoint"]
    assert table["bytes"] >= 1.4 * LIMIT_MIB * 2**20  # well above the container's memory: it cannot be held resident

    control = steps["control: resident table (upstream, no mmap)"]
    assert control["cgroup_limit_mib"] == LIMIT_MIB
    assert control["oom_kills"] >= 1 and -9 in control["exitcodes"] and not control["ok"]

    tp1 = steps["mmap in place, TP1"]["ranks"]
    assert [r["class"] for r in tp1] == ["Qwen4ExpPLEMappedHostEmbedding"]
    assert tp1[0]["storage"].startswith("in place") and tp1[0]["lookups_ok"] and tp1[0]["peak_rss_mib"] < LIMIT_MIB
    tp2 = steps["mmap in place, TP2"]["ranks"]
    rows = table["rows"]
    assert [r["rows"] for r in tp2] == [[0, rows // 2], [rows // 2, rows]]  # each rank maps only its range
    assert all(r["lookups_ok"] and r["local_rows_ok"] for r in tp2)
    built = steps["mmap table file built (f16 from bf16), TP1"]
    assert built["ranks"][0]["storage"].startswith("table file") and built["ranks"][0]["lookups_ok"]
    assert len(built["table_files"]) == 1 and built["oom_kills"] == 0


def test_table_file_damage_is_detected_and_quantized_tables_map(ple_env, work):
    run = cpu_proof.run_plan(env=ple_env, plan=cpu_proof.small_plan(), work=work, memory=None)
    steps = _steps(run)
    assert run["passed"], run["log_tail"]

    built = steps["table file built, TP2"]["table_files"]
    assert len(built) == 2  # one file per rank
    assert steps["table file reused, TP2"]["table_files"] == built  # same inodes: nothing rebuilt
    flipped = steps["flipped byte detected, rebuilt, TP2"]["table_files"]
    assert flipped.keys() == built.keys() and not set(flipped.values()) & set(built.values())
    cut = steps["truncation detected, rebuilt, TP2"]["table_files"]
    assert cut.keys() == built.keys() and not set(cut.values()) & set(flipped.values())
    rewritten = steps["rewritten checkpoint: new table file, TP2"]["table_files"]
    assert len(rewritten.keys() - built.keys()) == 2  # new digest, new names
    log = "\n".join(run["engine_log"])
    assert "fails its CRC-32" in log and "no table-file footer" in log

    config = steps["engram config validation"]
    assert config["ok"], [c for c in config["cases"] if not c["ok"]]
    assert len(config["cases"]) == 14

    for method in ("fp8", "nvfp4"):
        for tp in (1, 2):
            ranks = steps[f"{method} in place, TP{tp}"]["ranks"]
            assert len(ranks) == tp and all(r["storage"].startswith("in place") and r["lookups_ok"] for r in ranks)
