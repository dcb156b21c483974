"""The plain `docker run` line and the compose.yaml of a target, from its launch plan's container part.

Both name host folders by variable (MODEL_DIR, PLE_DIR) and pass VLLM_API_KEY by name only, so
the files hold no path of this machine and no secret.
"""

from __future__ import annotations

import yaml

from builder.config import LaunchPlan
COMPOSE_NAME = "launch/compose.yaml"
#: Where the published port is bound on the host unless the user changes it.
HOST_BIND = "127.0.0.1"


def docker_run_words(plan: LaunchPlan) -> list[list[str]]:
    """The `docker run` command as groups of words, one group per printed line.

    Host folders stay "$VAR" for the user's shell to expand, so the words are printed unquoted.
    """
    box = plan.container
    head = ["docker", "run", "-d", "--name", box.name]
    if box.gpus:
        head += ["--gpus", str(box.gpus)]
    head += ["--ipc", "host"] if box.ipc_host else ["--shm-size", str(box.shm_size)]
    for cap in box.cap_add:
        head += ["--cap-add", cap]
    head += ["--stop-timeout", str(box.stop_timeout_s), "-p", f"{HOST_BIND}:{box.port}:{box.port}"]
    lines = [head]
    for m in box.mounts:
        lines.append(["-v", f'"${m.host_env}":{m.path}{":ro" if m.read_only else ""}', "-e", f"{m.container_env}={m.path}"])
    lines.append([w for name in box.passthrough_env for w in ("-e", name)])
    lines.append([box.image])
    return lines


def docker_run_line(plan: LaunchPlan) -> str:
    """The documented line: what the README and the model card show, and the e2e test runs."""
    return " \\\n  ".join(" ".join(words) for words in docker_run_words(plan))


def compose_yaml(plan: LaunchPlan, *, target: str) -> str:
    box = plan.container
    service: dict = {
        "image": box.image,
        "container_name": box.name,
        "restart": box.restart,
        "ports": [f"{HOST_BIND}:${{PORT:-{box.port}}}:{box.port}"],
        "environment": {**box.environment, **{name: f"${{{name}:-}}" for name in box.passthrough_env}},
        "volumes": [
            {"type": "bind", "source": f"${{{m.host_env}:?set {m.host_env} to the host folder to mount}}", "target": m.path,
             "read_only": m.read_only}
            for m in box.mounts
        ],
        "stop_grace_period": f"{box.stop_timeout_s}s",
        "healthcheck": {
            "test": ["CMD", "healthcheck"],
            "interval": "15s",
            "timeout": "5s",
            "retries": 3,
            "start_period": f"{box.health_start_period_s}s",
        },
    }
    if box.ipc_host:
        service["ipc"] = "host"
    else:
        service["shm_size"] = box.shm_size
    if box.cap_add:
        service["cap_add"] = list(box.cap_add)
    if box.gpus:
        service["deploy"] = {
            "resources": {"reservations": {"devices": [{"driver": "nvidia", "count": box.gpus, "capabilities": ["gpu"]}]}}
        }
    header = (
        f"# {target}: the served image with the settings of launch/ENV.md (generated; do not edit).\n"
        f"# MODEL_DIR=/path/to/snapshot{' PLE_DIR=/path/to/ple' if len(box.mounts) > 1 else ''} docker compose -f {COMPOSE_NAME} up -d\n"
        f"# VLLM_API_KEY (optional) is passed through by name; PORT (default {box.port}) is the host port.\n"
    )
    body = yaml.safe_dump({"services": {"vllm": service}}, sort_keys=False, default_flow_style=False, width=1000)
    return header + body
