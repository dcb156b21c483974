"""The plain `docker run` lines and the compose files of a target, from its launch plan's container part.

One host: one line and launch/compose.yaml. Several hosts: a line and a compose file per role (head,
worker), on the host's network, since Ray, torch.distributed and NCCL bind the link's interface.
All name host folders by variable (MODEL_DIR, PLE_DIR) and pass VLLM_API_KEY by name only, so the
files hold no path of this machine and no secret.
"""

from __future__ import annotations

from typing import Literal

import yaml

from builder.config import LaunchPlan

COMPOSE_NAME = "launch/compose.yaml"
#: Where the published port is bound on the host unless the user changes it.
HOST_BIND = "127.0.0.1"
Role = Literal["head", "worker"]
ROLES: tuple[Role, ...] = ("head", "worker")


def compose_name(role: Role | None = None) -> str:
    return COMPOSE_NAME if role is None else f"launch/compose.{role}.yaml"


def container_name(plan: LaunchPlan, role: Role | None = None) -> str:
    return plan.container.name if role is None else f"{plan.container.name}-{role}"


def _rdma(plan: LaunchPlan) -> bool:
    """GPU hosts of a cluster hand NCCL the RDMA devices of their link (ConnectX-7: RoCE)."""
    return plan.cluster is not None and plan.container.gpus > 0


def docker_run_words(plan: LaunchPlan, *, role: Role | None = None) -> list[list[str]]:
    """The `docker run` command as groups of words, one group per printed line.

    Host folders stay "$VAR" for the user's shell to expand, so the words are printed unquoted.
    """
    box, cluster = plan.container, plan.cluster
    head = ["docker", "run", "-d", "--name", container_name(plan, role)]
    if box.gpus:
        head += ["--gpus", str(box.gpus)]
    head += ["--ipc", "host"] if box.ipc_host else ["--shm-size", str(box.shm_size)]
    for cap in box.cap_add:
        head += ["--cap-add", cap]
    head += ["--stop-timeout", str(box.stop_timeout_s)]
    head += ["-p", f"{HOST_BIND}:{box.port}:{box.port}"] if role is None else ["--network", "host"]
    lines = [head]
    if _rdma(plan):
        lines.append(["--device", "/dev/infiniband", "--ulimit", "memlock=-1"])
    for m in box.mounts:
        lines.append(["-v", f'"${m.host_env}":{m.path}{":ro" if m.read_only else ""}', "-e", f"{m.container_env}={m.path}"])
    passthrough = [w for name in box.passthrough_env for w in ("-e", name)]
    if cluster is not None and role == "worker":
        passthrough = ["-e", f'{cluster.head_address_env}="${cluster.head_address_env}"']
    lines.append(passthrough)
    lines.append([box.image] if role is None else [box.image, role])
    return lines


def docker_run_line(plan: LaunchPlan, *, role: Role | None = None) -> str:
    """The documented line: what the README and the model card show, and the e2e tests run."""
    return " \\\n  ".join(" ".join(words) for words in docker_run_words(plan, role=role))


def compose_files(plan: LaunchPlan, *, target: str) -> dict[str, str]:
    """{bundle path: text}: compose.yaml for one host, compose.head.yaml and compose.worker.yaml for several."""
    if plan.cluster is None:
        return {COMPOSE_NAME: compose_yaml(plan, target=target)}
    return {compose_name(role): compose_yaml(plan, target=target, role=role) for role in ROLES}


def compose_yaml(plan: LaunchPlan, *, target: str, role: Role | None = None) -> str:
    box, cluster = plan.container, plan.cluster
    passthrough = list(box.passthrough_env) if role != "worker" else []
    environment = {**box.environment, **{name: f"${{{name}:-}}" for name in passthrough}}
    if cluster is not None:
        environment[cluster.node_ip_env] = f"${{{cluster.node_ip_env}:-}}"
        if role == "worker":
            environment[cluster.head_address_env] = (
                f"${{{cluster.head_address_env}:?set {cluster.head_address_env} to the head host's address}}"
            )
    service: dict = {
        "image": box.image,
        "container_name": container_name(plan, role),
        "restart": box.restart,
        **({"ports": [f"{HOST_BIND}:${{PORT:-{box.port}}}:{box.port}"]} if role is None else {"network_mode": "host"}),
        **({"command": [role]} if role is not None else {}),
        "environment": environment,
        "volumes": [
            {"type": "bind", "source": f"${{{m.host_env}:?set {m.host_env} to the host folder to mount}}", "target": m.path,
             "read_only": m.read_only}
            for m in box.mounts
        ],
        "stop_grace_period": f"{box.stop_timeout_s}s",
    }
    if role != "worker":  # a worker runs no server; Ray's end ends its container
        service["healthcheck"] = {
            "test": ["CMD", "healthcheck"],
            "interval": "15s",
            "timeout": "5s",
            "retries": 3,
            "start_period": f"{box.health_start_period_s}s",
        }
    if box.ipc_host:
        service["ipc"] = "host"
    else:
        service["shm_size"] = box.shm_size
    if box.cap_add:
        service["cap_add"] = list(box.cap_add)
    if _rdma(plan):
        service["devices"] = ["/dev/infiniband:/dev/infiniband"]
        service["ulimits"] = {"memlock": -1}
    if box.gpus:
        service["deploy"] = {
            "resources": {"reservations": {"devices": [{"driver": "nvidia", "count": box.gpus, "capabilities": ["gpu"]}]}}
        }
    inputs = f"MODEL_DIR=/path/to/snapshot{' PLE_DIR=/path/to/ple' if len(box.mounts) > 1 else ''}"
    if role is None:
        header = (
            f"# {target}: the served image with the settings of launch/ENV.md (generated; do not edit).\n"
            f"# {inputs} docker compose -f {COMPOSE_NAME} up -d\n"
            f"# VLLM_API_KEY (optional) is passed through by name; PORT (default {box.port}) is the host port.\n"
        )
    elif role == "head":
        header = (
            f"# {target}, head host: the Ray head and the server (generated; do not edit). launch/ENV.md lists the ports.\n"
            f"# {inputs} docker compose -f {compose_name(role)} up -d\n"
            f"# The server listens on port {box.port} of this host (host network); VLLM_API_KEY is passed through by name.\n"
        )
    else:
        header = (
            f"# {target}, worker host: joins the head's Ray cluster (generated; do not edit).\n"
            f"# HEAD_ADDRESS=<head address> {inputs} docker compose -f {compose_name(role)} up -d\n"
            "# The model must lie at the same path as on the head.\n"
        )
    body = yaml.safe_dump({"services": {"vllm" if role is None else f"vllm-{role}": service}}, sort_keys=False, default_flow_style=False, width=1000)
    return header + body
