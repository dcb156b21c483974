"""The head and worker scripts of multi-node targets, and the cluster helper they run (no Ray here:
the two-container test runs them with the real Ray)."""

from __future__ import annotations

import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from builder.config import launch_plan, load_target
from builder.config.ple import PLE_TABLE_DIR_ENV
from builder.constants import (
    LAUNCH_CLUSTER_NAME,
    LAUNCH_ENV_DOC_NAME,
    LAUNCH_HEAD_SCRIPT_NAME,
    LAUNCH_SCRIPT_NAME,
    LAUNCH_WORKER_SCRIPT_NAME,
)
from builder.launch import render_launch

MULTI = ["gb10-x2", "cpu-smoke-x2"]
ROLE_FILES = (LAUNCH_HEAD_SCRIPT_NAME, LAUNCH_WORKER_SCRIPT_NAME, LAUNCH_CLUSTER_NAME)


@pytest.fixture(params=MULTI)
def launch_dir(request, tmp_path) -> tuple[str, Path]:
    cfg = load_target(request.param)
    for rel, text in render_launch(cfg=cfg, plan=launch_plan(cfg)).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return request.param, tmp_path / "launch"


@pytest.fixture
def inputs(tmp_path) -> dict[str, str]:
    model = tmp_path / "model dir"
    model.mkdir()
    (model / "config.json").write_text("{}")
    ple = tmp_path / "ple"
    ple.mkdir()
    return {"MODEL_DIR": str(model), PLE_TABLE_DIR_ENV: str(ple), "PATH": "/usr/bin:/bin", "PYTHON": sys.executable}


def _run(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize("name", ["gb10", "cpu-smoke", "h200"])
def test_one_host_targets_render_no_role_scripts(name):
    cfg = load_target(name)
    files = render_launch(cfg=cfg, plan=launch_plan(cfg))
    assert not set(ROLE_FILES) & set(files)
    assert "Hosts, network and ports" not in files[LAUNCH_ENV_DOC_NAME]


def test_role_scripts_pass_shellcheck(launch_dir):
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed: run `bash scripts/host-setup.sh`")
    for script in ("run_head.sh", "run_worker.sh"):
        lint = subprocess.run(["shellcheck", "--severity=style", str(launch_dir[1] / script)], capture_output=True, text=True)
        assert lint.returncode == 0, lint.stdout


def test_head_dry_run_shows_the_cluster_wait_then_the_ray_server(launch_dir, inputs):
    name, d = launch_dir
    cluster = launch_plan(load_target(name)).cluster
    proc = _run(d / "run_head.sh", {**inputs, "NODE_IP": "10.1.2.3", "DRY_RUN": "1"}, "--api-key", "k")
    assert proc.returncode == 0, proc.stderr
    head, *rest = proc.stdout.splitlines()
    argv = shlex.split(head)
    assert argv[1:3] == [str(d / "qfn_cluster.py"), "head"]
    assert argv[argv.index("--node-ip") + 1] == "10.1.2.3"
    assert argv[argv.index("--nodes") + 1] == str(cluster.nodes)
    assert argv[argv.index("--join-timeout") + 1] == str(cluster.join_timeout_s)
    assert f"--num-gpus={cluster.gpus_per_node}" in argv[argv.index("--ray-args") + 1]
    # After `--`: the one-host launch script, with the caller's flags.
    assert argv[argv.index("--") + 1:] == ["bash", str(d / "run_qsa_int8kv.sh"), "--api-key", "k"]
    server = shlex.split(rest[-1])
    assert server[server.index("--distributed-executor-backend") + 1] == "ray"
    assert "host address 10.1.2.3" in proc.stderr


def test_worker_needs_the_head_address_and_a_model(launch_dir, inputs):
    _, d = launch_dir
    proc = _run(d / "run_worker.sh", {**inputs, "NODE_IP": "10.1.2.4", "DRY_RUN": "1"})
    assert proc.returncode == 2 and "HEAD_ADDRESS is not set" in proc.stderr
    proc = _run(d / "run_worker.sh", {**inputs, "NODE_IP": "10.1.2.4", "DRY_RUN": "1", "HEAD_ADDRESS": "a b;c"})
    assert proc.returncode == 2 and "not a host name or address" in proc.stderr
    env = {k: v for k, v in inputs.items() if k != "MODEL_DIR"}
    proc = _run(d / "run_worker.sh", {**env, "NODE_IP": "10.1.2.4", "DRY_RUN": "1", "HEAD_ADDRESS": "10.1.2.3"})
    assert proc.returncode == 2 and "MODEL_DIR is not set" in proc.stderr
    proc = _run(d / "run_worker.sh", {**inputs, "NODE_IP": "10.1.2.4", "DRY_RUN": "1", "HEAD_ADDRESS": "10.1.2.3"})
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.splitlines()[0])
    assert argv[argv.index("--head") + 1].startswith("10.1.2.3:")


def test_env_doc_lists_the_ports_and_the_network_variables(launch_dir):
    name, d = launch_dir
    cluster = launch_plan(load_target(name)).cluster
    doc = (d / "ENV.md").read_text()
    assert "## Hosts, network and ports" in doc
    for port in cluster.ports:
        assert f"| {port.port} | {port.where} |" in doc
    for e in cluster.env:
        assert f"| `{e.name}` |" in doc
    assert "`HEAD_ADDRESS`" in doc and "`NODE_IP`" in doc


def _helper(d: Path, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(d / "qfn_cluster.py"), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_the_address_of_an_interface_and_a_missing_one(launch_dir):
    _, d = launch_dir
    assert _helper(d, "address", "lo").stdout.strip() == "127.0.0.1"
    proc = _helper(d, "address", "nosuch0")
    assert proc.returncode != 0 and "cluster.interface" in proc.stderr and "NODE_IP" in proc.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_worker_whose_head_never_answers_stops_after_its_timeout(launch_dir):
    _, d = launch_dir
    began = time.monotonic()
    proc = _helper(d, "worker", "--node-ip", "127.0.0.1", "--head", f"127.0.0.1:{_closed_port()}",
                   "--join-timeout", "2", "--lost-timeout", "5")
    took = time.monotonic() - began
    assert proc.returncode == 75, proc.stderr
    assert "did not answer within 2 s" in proc.stderr and "run_head.sh" in proc.stderr
    assert took < 10


def test_a_head_without_a_server_command_is_refused(launch_dir):
    _, d = launch_dir
    proc = _helper(d, "head", "--node-ip", "127.0.0.1", "--nodes", "2", "--gpus", "0", "--ray-port", "6379",
                   "--join-timeout", "5", "--lost-timeout", "5")
    assert proc.returncode == 2 and "server command" in proc.stderr


def test_the_role_files_ship_beside_the_launch_script(launch_dir):
    name, d = launch_dir
    cfg = load_target(name)
    files = render_launch(cfg=cfg, plan=launch_plan(cfg))
    assert {LAUNCH_SCRIPT_NAME, *ROLE_FILES} <= set(files)
    assert "compose.head.yaml" in {Path(p).name for p in files} and "compose.worker.yaml" in {Path(p).name for p in files}
