"""What `docker run` is given per target; no daemon needed."""

from __future__ import annotations

import pytest

from builder.config import launch_plan
from builder.config.overrides import LaunchOverrides
from builder.config.ple import PLE_TABLE_DIR_ENV
from builder.constants import CONTAINER_MODEL_DIR, CONTAINER_PLE_DIR
from builder.errors import ServeError
from builder.serve.container import BindMount, run_spec


def test_gb10_gets_gpu_host_ipc_ptrace_read_only_model_and_writable_ple_tables(pinned, tmp_path):
    spec = run_spec(cfg=pinned("gb10"), image="img", model_dir=tmp_path, ple_dir=tmp_path / "ple", bind="127.0.0.1", host_port=None)
    assert spec.gpus == 1
    assert spec.ipc_mode == "host" and spec.shm_size is None
    assert spec.cap_add == ["SYS_PTRACE"]
    assert BindMount(host=str(tmp_path.resolve()), container=CONTAINER_MODEL_DIR, read_only=True) in spec.mounts
    # The engine builds PLE table files there when the checkpoint's table cannot be mapped in place.
    assert BindMount(host=str((tmp_path / "ple").resolve()), container=CONTAINER_PLE_DIR, read_only=False) in spec.mounts
    assert spec.ports == {"8000/tcp": ("127.0.0.1", 8000)}
    assert spec.command == []  # the image's rendered launch script runs
    assert spec.environment["MODEL_DIR"] == CONTAINER_MODEL_DIR
    assert spec.environment[PLE_TABLE_DIR_ENV] == CONTAINER_PLE_DIR


@pytest.mark.parametrize("name", ["gb10", "cmp170hx-x2", "h200"])
def test_every_input_the_launch_requires_is_set(pinned, tmp_path, name):
    cfg = pinned(name)
    spec = run_spec(cfg=cfg, image="i", model_dir=tmp_path, ple_dir=tmp_path, bind="127.0.0.1", host_port=None)
    assert {r.env for r in launch_plan(cfg).required} <= set(spec.environment)


def test_cmp170hx_gets_both_gpus(pinned, tmp_path):
    spec = run_spec(cfg=pinned("cmp170hx-x2"), image="i", model_dir=tmp_path, ple_dir=tmp_path, bind="127.0.0.1", host_port=None)
    assert spec.gpus == 2


def test_mapped_ple_without_ple_dir_is_refused(pinned, tmp_path):
    with pytest.raises(ServeError) as err:
        run_spec(cfg=pinned("gb10"), image="i", model_dir=tmp_path, ple_dir=None, bind="127.0.0.1", host_port=None)
    assert "--ple-dir" in err.value.hint and "read-write" in err.value.hint


def test_ple_dir_for_a_target_that_does_not_map_is_refused(pinned, tmp_path):
    with pytest.raises(ServeError) as err:
        run_spec(cfg=pinned("cpu-smoke"), image="i", model_dir=tmp_path, ple_dir=tmp_path, bind="127.0.0.1", host_port=None)
    assert "drop --ple-dir" in err.value.hint


def test_cpu_smoke_has_no_gpu_no_ptrace_and_shm(pinned, tmp_path):
    spec = run_spec(cfg=pinned("cpu-smoke"), image="i", model_dir=tmp_path, ple_dir=None, bind="0.0.0.0", host_port=18000)
    assert spec.gpus == 0 and spec.cap_add == [] and spec.ipc_mode is None and spec.shm_size
    assert spec.ports == {"8000/tcp": ("0.0.0.0", 18000)}
    assert spec.environment == {"MODEL_DIR": CONTAINER_MODEL_DIR}
    assert spec.mounts == [BindMount(host=str(tmp_path.resolve()), container=CONTAINER_MODEL_DIR)]
    assert spec.secret_environment == {}


def test_serve_overrides_reach_the_container_as_appended_flags_and_env(pinned, tmp_path):
    cfg = pinned("cpu-smoke")
    overrides = LaunchOverrides.parse(
        env=["VLLM_CPU_KVCACHE_SPACE=4"], extra_args=["--max-num-seqs", "2"], cors_origins=["http://localhost:3000"],
        log_level="debug",
    )
    spec = run_spec(cfg=cfg, image="i", model_dir=tmp_path, ple_dir=None, bind="127.0.0.1", host_port=None,
                    plan=launch_plan(cfg, overrides=overrides))
    # The image's launch script already has the target's flags; only this run's go after the image name.
    assert spec.command == ["--allowed-origins", '["http://localhost:3000"]', "--uvicorn-log-level", "debug",
                            "--max-num-seqs", "2"]
    assert spec.environment == {"MODEL_DIR": CONTAINER_MODEL_DIR, "VLLM_LOGGING_LEVEL": "DEBUG",
                                "VLLM_CPU_KVCACHE_SPACE": "4"}


def test_api_key_goes_to_the_container_but_never_into_printable_fields(pinned, tmp_path):
    key = "sk-test-" + "x" * 24
    spec = run_spec(cfg=pinned("cpu-smoke"), image="i", model_dir=tmp_path, ple_dir=None, bind="127.0.0.1",
                    host_port=None, api_key=key)
    assert spec.secret_environment["VLLM_API_KEY"].get_secret_value() == key
    for shown in (repr(spec), str(spec), spec.model_dump_json(), str(spec.model_dump())):
        assert key not in shown
    assert key not in " ".join(spec.command) and key not in str(spec.environment)
