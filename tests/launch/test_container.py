"""The `docker run` line and compose.yaml of every target come from its launch plan, and are the
ones docs/images.md and the model card show; `docker compose config` accepts each compose file."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from builder.config import available_targets, launch_plan, load_target
from builder.constants import REPO_ROOT
from builder.launch.compose import ROLES, compose_yaml, docker_run_line

TARGETS = available_targets()
#: (target, role): one host has no role; a multi-node target has a line and a compose file per role.
LAYOUTS = [(name, role) for name in TARGETS
           for role in ((None,) if load_target(name).cluster.nodes == 1 else ROLES)]


def _compose(name: str, role=None) -> dict:
    text = compose_yaml(launch_plan(load_target(name)), target=name, role=role)
    return yaml.safe_load(text)["services"]["vllm" if role is None else f"vllm-{role}"]


@pytest.mark.parametrize(("name", "role"), LAYOUTS)
def test_readme_shows_each_targets_rendered_docker_run_line(name, role):
    assert docker_run_line(launch_plan(load_target(name)), role=role) in (REPO_ROOT / "docs" / "images.md").read_text()


@pytest.mark.parametrize(("name", "role"), LAYOUTS)
def test_compose_matches_the_plan(name, role):
    cfg = load_target(name)
    box = launch_plan(cfg).container
    svc = _compose(name, role)
    assert svc["image"] == f"qfn-int8kv:{name}-0.1.0"
    assert svc["restart"] == "unless-stopped"
    if role is None:
        assert "ports" in svc and "command" not in svc
    else:  # Ray and NCCL bind the link's interface: the host's network, and the role as the command
        assert svc["network_mode"] == "host" and "ports" not in svc and svc["command"] == [role]
    if role == "worker":
        assert "healthcheck" not in svc and "VLLM_API_KEY" not in svc["environment"]
        assert svc["environment"]["HEAD_ADDRESS"].startswith("${HEAD_ADDRESS:?")
        return
    assert svc["healthcheck"]["test"] == ["CMD", "healthcheck"]
    assert svc["stop_grace_period"] == f"{box.stop_timeout_s}s"
    assert all(v["type"] == "bind" for v in svc["volumes"])
    assert [(v["target"], v["read_only"]) for v in svc["volumes"]] == [(m.path, m.read_only) for m in box.mounts]
    assert svc["volumes"][0]["read_only"]  # the model snapshot is never writable
    assert svc["environment"]["VLLM_API_KEY"] == "${VLLM_API_KEY:-}"  # passed by name, no value in the file
    if cfg.target.gpu_count:
        [device] = svc["deploy"]["resources"]["reservations"]["devices"]
        assert device == {"driver": "nvidia", "count": cfg.target.gpu_count, "capabilities": ["gpu"]}
        assert svc["ipc"] == "host" and "shm_size" not in svc
    else:
        assert "deploy" not in svc and svc["shm_size"] == "1g"
    assert ("cap_add" in svc) == cfg.ple.cpu_offload


def _compose_cli() -> list[str] | None:
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


@pytest.mark.skipif(_compose_cli() is None, reason="scripts/host-setup.sh installs docker-compose (make test runs it)")
@pytest.mark.parametrize(("name", "role"), LAYOUTS)
def test_docker_compose_config_accepts_it(name, role, tmp_path):
    path = tmp_path / "compose.yaml"
    path.write_text(compose_yaml(launch_plan(load_target(name)), target=name, role=role))
    env = {"PATH": "/usr/bin:/bin", "MODEL_DIR": str(tmp_path), "PLE_DIR": str(tmp_path), "HOME": str(tmp_path),
           "HEAD_ADDRESS": "10.0.0.1"}
    proc = subprocess.run([*_compose_cli(), "-f", str(path), "config"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)["services"]["vllm" if role is None else f"vllm-{role}"]
    assert resolved["image"] == f"qfn-int8kv:{name}-0.1.0"
    # Without MODEL_DIR compose refuses to start, naming the variable.
    env.pop("MODEL_DIR")
    proc = subprocess.run([*_compose_cli(), "-f", str(path), "config"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode != 0 and "MODEL_DIR" in proc.stderr


def test_card_shows_the_docker_run_line(tmp_path):
    from builder.bundle.render import render_to

    render_to(target="h200", out=tmp_path / "r", evidence_root=tmp_path / "none")
    card = (tmp_path / "r" / "README.md").read_text()
    assert docker_run_line(launch_plan(load_target("h200"))) in card
    assert "launch/compose.yaml" in card
