"""The container part of the launch plan and one serve run's overrides."""

from __future__ import annotations

import pytest

from builder.config import launch_plan, load_target
from builder.config.overrides import LaunchOverrides
from builder.errors import ConfigError
from builder.image.recipe import image_tag


@pytest.mark.parametrize("name", ["gb10", "h200", "cmp170hx-x2", "cpu-smoke"])
def test_one_image_name_for_build_serve_docker_run_and_compose(name):
    cfg = load_target(name)
    assert launch_plan(cfg).container.image == image_tag(cfg) == f"qfn-int8kv:{name}-0.1.0"


def test_gpu_targets_share_host_ipc_and_mount_the_ple_table():
    box = launch_plan(load_target("cmp170hx-x2")).container
    assert box.gpus == 2 and box.ipc_host and box.shm_size is None and box.cap_add == ["SYS_PTRACE"]
    # The model read-only; the PLE table-file folder read-write, where the ple-mmap engine builds its files.
    assert [(m.host_env, m.path, m.container_env, m.read_only) for m in box.mounts] == [
        ("MODEL_DIR", "/models/model", "MODEL_DIR", True),
        ("PLE_DIR", "/models/ple-tables", "VLLM_PLE_MMAP_TABLE_DIR", False),
    ]


def test_no_table_file_mount_when_the_series_lacks_the_mmap_patch():
    cfg = load_target("gb10")
    box = launch_plan(cfg, series={"qsa-int8"}).container
    assert [m.host_env for m in box.mounts] == ["MODEL_DIR"]


def test_cpu_smoke_gets_shm_and_no_gpu():
    box = launch_plan(load_target("cpu-smoke")).container
    assert box.gpus == 0 and not box.ipc_host and box.shm_size == "1g" and box.cap_add == []
    assert box.min_shm_mib * 1024 * 1024 <= 1 << 30  # the size we pass satisfies the launch's own check


def test_drain_on_stop_is_a_flag_of_the_plan():
    plan = launch_plan(load_target("cpu-smoke"))
    [flag] = [f for f in plan.flags if f.flag == "--shutdown-timeout"]
    assert flag.value == str(plan.container.drain_s) and plan.container.drain_s < plan.container.stop_timeout_s


def test_target_cors_and_log_level_are_baked_in(target_data):
    from builder.config import parse_config

    data = target_data("cpu-smoke")
    data["server"]["cors_origins"] = ["https://app.example"]
    data["server"]["log_level"] = "warning"
    plan = launch_plan(parse_config(data, source="t"))
    words = plan.argv(model_path="/m")
    assert words[words.index("--allowed-origins") + 1] == '["https://app.example"]'
    assert words[words.index("--uvicorn-log-level") + 1] == "warning"
    assert {e.name: e.value for e in plan.env}["VLLM_LOGGING_LEVEL"] == "WARNING"
    assert plan.serve_args() == [] and plan.serve_env() == {}  # baked in the image, nothing to add at run time


def test_overrides_only_add_serve_entries_after_the_target_ones():
    cfg = load_target("cpu-smoke")
    base = launch_plan(cfg)
    plan = launch_plan(cfg, overrides=LaunchOverrides.parse(env=["A=1"], extra_args=["--enable-prefix-caching"],
                                                            cors_origins=[], log_level="error"))
    assert plan.flags[: len(base.flags)] == base.flags  # what the image bakes in is unchanged
    assert plan.serve_args() == ["--uvicorn-log-level", "error", "--enable-prefix-caching"]
    assert plan.serve_env() == {"VLLM_LOGGING_LEVEL": "ERROR", "A": "1"}


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"env": ["NOEQUALS"]}, "--env 'NOEQUALS'"),
        ({"env": ["1BAD=x"]}, "--env '1BAD=x'"),
        ({"env": ["VLLM_API_KEY=s"]}, "would put the key on a command line"),
        ({"extra_args": ["--api-key", "s"]}, "--api-key is set by builder serve"),
        ({"extra_args": ["--port=9000"]}, "--port is set by builder serve"),
        ({"log_level": "verbose"}, "--log-level 'verbose'"),
    ],
)
def test_bad_overrides_are_refused_naming_the_option(kwargs, names):
    args = {"env": [], "extra_args": [], "cors_origins": [], "log_level": None, **kwargs}
    with pytest.raises(ConfigError) as err:
        LaunchOverrides.parse(**args)
    assert names in err.value.message and err.value.hint
