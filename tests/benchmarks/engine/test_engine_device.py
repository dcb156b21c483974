"""The device driver's CPU-testable parts: argument handling, the per-arm launch rendered from the
h200-small target (which must keep the h200 launch), the device calls, and log triage."""

from __future__ import annotations

import json

import pytest

from benchmarks.engine import device
from benchmarks.engine.__main__ import device_calls
from benchmarks.engine import model as gen
from builder.config import launch_plan, load_target
from builder.errors import ConfigError


def flags(plan) -> dict[str, str | None]:
    return {f.flag: f.value for f in plan.flags}


def test_h200_small_keeps_every_h200_launch_flag_but_ple():
    h200, small = flags(launch_plan(load_target("h200"))), flags(launch_plan(load_target("h200-small")))
    # differences the target file documents: model name, GPU share, and no PLE table
    for flag, value in h200.items():
        if flag in ("--engram-config",):
            continue
        assert flag in small, flag
        if flag not in ("--served-model-name", "--gpu-memory-utilization"):
            assert small[flag] == value, flag
    assert "--enforce-eager" in small and "--kv-cache-memory-bytes" in small


def test_each_arm_is_the_target_with_one_kv_dtype_and_port():
    base = load_target(device.TARGET)
    int8 = device.arm_config(base, kv_dtype="int8_per_token_head", port=8101)
    fp8 = device.arm_config(base, kv_dtype="fp8", port=8102)
    assert (int8.kv_cache.scale_layout, fp8.kv_cache.scale_layout) == ("side", None)
    argv = launch_plan(fp8).argv(model_path="/m")
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8" and argv[argv.index("--port") + 1] == "8102"
    with pytest.raises(ConfigError, match="kv_cache.dtype"):
        device.arm_config(base, kv_dtype="int4", port=1)


def test_the_arms_are_int8_fp8_and_bf16_on_distinct_ports():
    assert [a[1] for a in device.ARMS] == ["int8_per_token_head", "fp8", "auto"]
    assert len({a[2] for a in device.ARMS}) == 3


def test_marker_name_matches_the_generator():
    assert device.MODEL_MARKER == gen.MARKER


def test_arguments_are_checked(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        device.main(["land", "--carried", str(tmp_path)])
    assert exc.value.code == 2 and "manifest.json" in capsys.readouterr().err
    (tmp_path / "manifest.json").write_text(json.dumps({"components": [], "pieces": []}))
    with pytest.raises(SystemExit):
        device.main(["measure", "--carried", str(tmp_path)])
    assert "--out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        device.main(["measure", "--carried", str(tmp_path), "--out", str(tmp_path / "o"), "--budget-s", "0"])
    assert "--budget-s" in capsys.readouterr().err


def test_root_cause_and_weight_load_triage(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "(Worker pid=1) INFO 11-30 19:01:21 [model_runner.py:399] Loading model from scratch...\n"
        "(Worker pid=1) ERROR 11-30 19:01:21 [multiproc_executor.py:1057] AssertionError: unsupported output_gate_type=None\n"
        "Exception: WorkerProc initialization failed due to an exception in a background process.\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n")
    causes = device.root_cause(log)
    assert causes[0] == "AssertionError: unsupported output_gate_type=None" and len(causes) == 3
    assert not device.weight_load_failed(causes)
    assert device.weight_load_failed(["ValueError: Following weights were not initialized from checkpoint: {...}"])


def test_one_call_per_piece_the_last_measures(tmp_path):
    calls = device_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00", "piece-01", "piece-02"], budget_s=200)
    assert [c["carry"][-1] for c in calls] == [".dev/e/carry/piece-00", ".dev/e/carry/piece-01", ".dev/e/carry/piece-02"]
    assert all(c["carry"][:2] == [".dev/e/run", ".dev/e/carry/manifest.json"] for c in calls)
    assert all(" land " in c["command"] for c in calls[:-1])
    assert " measure " in calls[-1]["command"] and "--budget-s 200" in calls[-1]["command"]
    assert calls[-1]["timeout_s"] > 200
    assert all(len(c["command"]) <= 2000 for c in calls)  # the run tool's limit


def test_prepare_refuses_a_measuring_budget_the_device_call_cannot_hold(tmp_path, capsys):
    from benchmarks.engine.__main__ import main

    with pytest.raises(SystemExit):
        main(["prepare", "--out", str(tmp_path / "o"), "--repo-root", str(tmp_path), "--budget-s", "511"])
    assert "--budget-s must be in 1..510" in capsys.readouterr().err
    calls = device_calls(out=tmp_path, repo_rel=".dev/e", pieces=["piece-00"], budget_s=510)
    assert calls[-1]["timeout_s"] <= 600  # the run tool's per-call limit


def test_the_run_tree_replaces_only_what_copy_run_tree_wrote(tmp_path):
    from benchmarks.engine.__main__ import _earlier_run_tree, copy_run_tree

    run = tmp_path / "run"
    run.mkdir()
    copy_run_tree(run)
    assert _earlier_run_tree(run) is None
    (run / "notes.txt").write_text("mine")
    assert "notes.txt" in _earlier_run_tree(run)
