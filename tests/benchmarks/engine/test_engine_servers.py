"""The servers of a measurement: the per-arm launch rendered from the h200-small target (which must keep
the h200 launch), the layouts' GPU splits, and the triage of their logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.engine import model as gen
from benchmarks.engine import servers as sv
from builder.config import launch_plan, load_target
from builder.errors import ConfigError


def flags(plan) -> dict[str, str | None]:
    return {f.flag: f.value for f in plan.flags}


def test_h200_small_keeps_every_h200_launch_flag_and_env_ple_included():
    h200_plan, small_plan = launch_plan(load_target("h200")), launch_plan(load_target("h200-small"))
    h200, small = flags(h200_plan), flags(small_plan)
    # differences the target file documents: model name and GPU share; PLE is the h200's (mmap'd table)
    for flag, value in h200.items():
        assert flag in small, flag
        if flag not in ("--served-model-name", "--gpu-memory-utilization"):
            assert small[flag] == value, flag
    assert json.loads(small["--engram-config"]) == {"cpu_offload": True, "mmap_table": True}
    assert {e.name: e.value for e in h200_plan.env}.items() <= {e.name: e.value for e in small_plan.env}.items()
    assert {r.env for r in h200_plan.required} == {r.env for r in small_plan.required}
    assert "--enforce-eager" in small and "--kv-cache-memory-bytes" in small


def test_each_arm_is_the_target_with_one_kv_dtype_and_port():
    base = load_target(sv.TARGET)
    int8 = sv.arm_config(base, kv_dtype="int8_per_token_head", port=8101)
    fp8 = sv.arm_config(base, kv_dtype="fp8", port=8102)
    assert (int8.kv_cache.scale_layout, fp8.kv_cache.scale_layout) == ("side", None)
    argv = launch_plan(fp8).argv(model_path="/m")
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8" and argv[argv.index("--port") + 1] == "8102"
    with pytest.raises(ConfigError, match="kv_cache.dtype"):
        sv.arm_config(base, kv_dtype="int4", port=1)


def test_the_arms_are_int8_fp8_and_bf16_on_distinct_ports():
    assert [a[1] for a in sv.ARMS] == ["int8_per_token_head", "fp8", "auto"]
    assert len({a[2] for a in sv.ARMS}) == 3


def test_marker_name_matches_the_generator():
    assert sv.MODEL_MARKER == gen.MARKER


def test_root_cause_and_weight_load_triage(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "(Worker pid=1) INFO 11-30 19:01:21 [model_runner.py:399] Loading model from scratch...\n"
        "(Worker pid=1) ERROR 11-30 19:01:21 [multiproc_executor.py:1057] AssertionError: unsupported output_gate_type=None\n"
        "Exception: WorkerProc initialization failed due to an exception in a background process.\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n")
    causes = sv.root_cause(log)
    assert causes[0] == "AssertionError: unsupported output_gate_type=None" and len(causes) == 3
    assert not sv.weight_load_failed(causes)
    assert sv.weight_load_failed(["ValueError: Following weights were not initialized from checkpoint: {...}"])


def test_tp2_ep_layout_is_cmp170hx_x2s_split_on_the_small_model(target_data):
    """The same model served with TP2 + EP, int8 vs bf16; the split is read from
    the target that ships it, so a change there changes this run."""
    from benchmarks.engine.transport.chunked import LAYOUT_KINDS

    source, arms = sv.LAYOUTS["tp2-ep"]
    split = load_target(source)
    assert [a[0] for a in arms] == ["int8", "bf16"] and LAYOUT_KINDS["tp2-ep"] == "nvidia-h200-x2"
    base = load_target(sv.TARGET)
    for label, dtype, port in arms:
        cfg = sv.arm_config(base, kv_dtype=dtype, port=port, layout="tp2-ep")
        f = flags(launch_plan(cfg))
        assert f["--tensor-parallel-size"] == str(split.parallel.tensor_parallel_size) == "2"
        assert "--enable-expert-parallel" in f and f["--kv-cache-dtype"] == dtype
        assert f["--distributed-executor-backend"] == "mp" and cfg.target.gpu_count == 2
    one = flags(launch_plan(sv.arm_config(base, kv_dtype="auto", port=8103)))
    assert "--tensor-parallel-size" not in one and "--enable-expert-parallel" not in one


def test_a_server_log_keeps_its_start_up_and_its_end(tmp_path):
    """A tail alone begins after start-up and loses where the ~200 s to ready went."""
    log_path = tmp_path / "server-int8-checkpoint.log"
    log_path.write_text("\n".join(f"line {i}" for i in range(1000)))
    sv.keep_tails({"int8": {"log": log_path}})
    kept = (tmp_path / "server-int8-checkpoint.tail.log").read_text().splitlines()
    assert not log_path.exists()
    assert kept[:2] == ["line 0", "line 1"] and kept[-1] == "line 999"
    assert kept[sv.LOG_HEAD_LINES] == f"[... {1000 - sv.LOG_HEAD_LINES - sv.LOG_TAIL_LINES} lines left out ...]"
    short = tmp_path / "short.log"
    short.write_text("a\nb")
    assert sv.head_and_tail(short) == "a\nb"


def test_the_dummy_weights_retry_turns_the_ple_mmap_off():
    """The ple-mmap patch refuses load_format=dummy (it maps rows from the checkpoint): the retry
    must override the launch's --engram-config, last on the command line, keeping cpu_offload."""
    plan = launch_plan(load_target("h200-small"))
    assert json.loads(flags(plan)["--engram-config"])["mmap_table"] is True
    retry = list(sv.DUMMY_RETRY_ARGS)
    assert retry[:2] == ["--load-format", "dummy"]
    assert json.loads(retry[retry.index("--engram-config") + 1]) == {"cpu_offload": True}


def test_every_folder_the_launch_requires_is_given_as_the_launch_script_would(tmp_path):
    plan = launch_plan(load_target("h200-small"))
    dirs = sv.required_dirs(plan, tmp_path)
    assert set(dirs) == {r.env for r in plan.required if r.is_dir} - {"MODEL_DIR"} == {"VLLM_PLE_MMAP_TABLE_DIR"}
    assert all(Path(d).is_dir() and Path(d).is_relative_to(tmp_path) for d in dirs.values())
