"""`builder serve` refuses a bad option before it prepares a model or contacts docker."""

from __future__ import annotations

import pytest

from builder.config import launch_plan, load_target
from builder.config.overrides import LaunchOverrides
from builder.errors import ConfigError, DockerError, ServeError

#: Names the launch reads or sets itself (LAUNCH_RESERVED_ENV), and one cpu-smoke's own plan sets.
RESERVED = ["DRY_RUN", "PATH", "MODEL_DIR", "PYTHON", "PYTHONPATH", "BASH_ENV", "HF_HUB_OFFLINE",
            "VLLM_PLE_MMAP_TABLE_DIR", "VLLM_USE_DEEP_GEMM", "VLLM_CPU_KVCACHE_SPACE"]


@pytest.mark.parametrize("name", RESERVED)
def test_env_of_a_reserved_name_is_refused_before_docker(name, listener, run_cli):
    code, out, err = run_cli("serve", "--target", "cpu-smoke", "--env", f"{name}=x")
    text = " ".join(err.split())
    assert code == ConfigError.exit_code == 2, out + err
    assert f"--env {name}" in text and "fix:" in text
    assert listener.seen() == 0


@pytest.mark.parametrize("name", ["DRY_RUN", "VLLM_CPU_KVCACHE_SPACE"])
def test_env_refusal_comes_before_docker_on_a_pinned_target(name, listener, run_cli, pinned_cpu_smoke, tmp_path):
    code, out, err = run_cli("serve", "--target", str(pinned_cpu_smoke), "--model-dir", str(tmp_path), "--env", f"{name}=x")
    assert code == 2 and f"--env {name}" in " ".join(err.split()), out + err
    assert listener.seen() == 0


def test_an_allowed_env_name_passes_and_the_run_goes_on_to_docker(listener, run_cli, pinned_cpu_smoke, tmp_path):
    from builder.config.overrides import reserved_by_target

    plan = launch_plan(load_target("cpu-smoke"))
    parsed = LaunchOverrides.parse(env=["NCCL_DEBUG=INFO"], extra_args=[], cors_origins=[], log_level=None,
                                   target_env=reserved_by_target(plan))
    assert parsed.env == {"NCCL_DEBUG": "INFO"}
    code, out, err = run_cli("serve", "--target", str(pinned_cpu_smoke), "--model-dir", str(tmp_path),
                             "--env", "NCCL_DEBUG=INFO")
    assert code == DockerError.exit_code, out + err  # the listener is no docker daemon
    assert listener.seen() >= 1


def test_env_and_log_level_may_not_both_set_the_log_level():
    with pytest.raises(ConfigError, match="--env VLLM_LOGGING_LEVEL and --log-level"):
        LaunchOverrides.parse(env=["VLLM_LOGGING_LEVEL=DEBUG"], extra_args=[], cors_origins=[], log_level="info")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--memory", "lots"], "--memory 'lots'"),
        (["--memory", "1k"], "below docker's minimum"),
        (["--name", "bad name"], "--name 'bad name'"),
        (["--name", "x"], "--name 'x'"),
        (["--bind", "localhost"], "--bind 'localhost'"),
        (["--port", "70000"], "--port 70000"),
        (["--ple-dir", "."], "--ple-dir was given"),
        (["--timeout", "0"], "--timeout must be a positive"),
    ],
)
def test_bad_serve_options_are_refused_before_docker(args, named, listener, run_cli, pinned_cpu_smoke, tmp_path):
    code, out, err = run_cli("serve", "--target", str(pinned_cpu_smoke), "--model-dir", str(tmp_path), *args)
    assert code == ServeError.exit_code, out + err
    assert named in " ".join(err.split()) and "fix:" in err
    assert listener.seen() == 0


def test_a_missing_model_dir_is_refused_before_docker(listener, run_cli, pinned_cpu_smoke, tmp_path):
    code, out, err = run_cli("serve", "--target", str(pinned_cpu_smoke), "--model-dir", str(tmp_path / "nope"))
    assert code == ServeError.exit_code and "--model-dir" in err, out + err
    assert listener.seen() == 0


def test_stop_with_a_bad_name_is_refused_before_docker(listener, run_cli, pinned_cpu_smoke):
    code, out, err = run_cli("serve", "--target", str(pinned_cpu_smoke), "--stop", "--name", "a/b")
    assert code == ServeError.exit_code and "--name 'a/b'" in err, out + err
    assert listener.seen() == 0


def test_a_good_memory_value_is_taken_as_docker_takes_it():
    from builder.serve.options import check_memory

    assert check_memory("100g") == 100 << 30 and check_memory("512MB") == 512 << 20 and check_memory("7340032") == 7 << 20


@pytest.mark.parametrize("target", ["cpu-smoke-x2", "gb10-x2"])
def test_a_multi_host_target_is_refused_pointing_at_its_role_lines(target, listener, run_cli):
    code, out, err = run_cli("serve", "--target", target)
    text = " ".join(err.split())
    assert code == ServeError.exit_code, out + err
    assert "spans 2 hosts" in text and "IMAGE head / worker" in text and "builder wait" in text
    assert listener.seen() == 0
