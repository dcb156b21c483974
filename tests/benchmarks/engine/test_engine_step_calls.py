"""step_calls on traces laid out as an A/B keeps them: arms whose decode steps make the same CUDA
calls are named together, one more launch per step parts them, and an empty folder is refused."""

from __future__ import annotations

import gzip
import json

from benchmarks.engine import breakdown as bd
from benchmarks.engine import step_calls as sc


def trace(path, *, extra_launch: bool) -> None:
    """Six decode steps of one request (the last has no end and the first two warm up: three count): the step kernel's launch, then a graph replay; `extra_launch`
    adds one eager kernel launch to every step."""
    events, corr = [], 0
    for i in range(6):
        t, gpu = 100.0 * i, 1000.0 + 100.0 * i
        launches = [("cuLaunchKernelEx", bd.STEP_KERNEL, [2, 1, 1]), ("cudaGraphLaunch", "fused_moe_kernel", [1, 1, 1])]
        if extra_launch:
            launches.append(("cudaLaunchKernel", "scale_views_kernel", [1, 1, 1]))
        for k, (call, kernel, grid) in enumerate(launches):
            corr += 1
            events.append({"ph": "X", "cat": "cuda_runtime", "name": call, "ts": t + 10 * k, "dur": 2.0, "pid": 1,
                           "tid": 1, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": kernel, "ts": gpu + 10 * k, "dur": 5.0, "pid": 0,
                           "tid": 7, "args": {"grid": grid, "correlation": corr}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))


def test_arms_with_the_same_calls_are_named_together_and_an_extra_launch_parts_them(tmp_path, capsys):
    profiles = tmp_path / "profiles"
    trace(profiles / "fp8" / "in8192-c1_dp0_rank0.1.pt.trace.json.gz", extra_launch=False)
    trace(profiles / "int8" / "in8192-c1_dp0_rank0.2.pt.trace.json.gz", extra_launch=False)
    trace(profiles / "bf16" / "in8192-c1_dp0_rank0.3.pt.trace.json.gz", extra_launch=True)
    (profiles / "int8" / "notes.txt").write_text("not a trace")
    assert sc.main(["--out", str(tmp_path / "out"), str(profiles)]) == 0
    rows = json.loads((tmp_path / "out" / sc.JSON_FILE).read_text())
    got = {r["arm"]: (r["calls"], r["share"], r["same_as"]) for r in rows}
    assert got == {"fp8": (2, 1.0, ["int8"]), "int8": (2, 1.0, ["fp8"]), "bf16": (3, 1.0, [])}
    assert [r["input_len"] for r in rows] == [8192] * 3
    md = (tmp_path / "out" / sc.MD_FILE).read_text()
    assert "| bf16 | 8K x c1 | 3 | 3 | 100% | - |" in md
    assert "| fp8 | 8K x c1 | 3 | 2 | 100% | int8 |" in md
    assert f"1. `cuLaunchKernelEx > {bd.STEP_KERNEL}`" in md


def test_a_folder_without_kept_traces_is_refused(tmp_path, capsys):
    (tmp_path / "int8").mkdir()
    assert sc.main(["--out", str(tmp_path / "out"), str(tmp_path)]) == 2
    assert "no kept trace under" in capsys.readouterr().err and not (tmp_path / "out").exists()
