"""Render launch/run_qsa_int8kv.sh and launch/ENV.md from the launch plan (one source for both)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import jinja2

import builder
from builder.config import LaunchPlan, ReleaseConfig, config_digest
from builder.config.launch import MODEL_DIR_ENV
from builder.constants import (
    ENV_DRY_RUN,
    ENV_LAUNCH_PYTHON,
    LAUNCH_CLUSTER_NAME,
    LAUNCH_ENV_DOC_NAME,
    LAUNCH_HEAD_SCRIPT_NAME,
    LAUNCH_MIDDLEWARE_NAME,
    LAUNCH_SCRIPT_NAME,
    LAUNCH_TEMPLATES_DIR,
    LAUNCH_WORKER_SCRIPT_NAME,
)
from builder.errors import RenderError
from builder.launch.compose import compose_files
from builder.launch.environment import make_environment, render_template
from builder.launch.k8s import k8s_manifests

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: The script's own knobs, documented in ENV.md from this one table.
SCRIPT_KNOBS = (
    (ENV_DRY_RUN, "Set to 1 to print the resolved environment and command without starting the server."),
    (ENV_LAUNCH_PYTHON, "Python interpreter that has the engine installed (default: python3)."),
)
#: A Hugging Face snapshot folder always holds this file; its absence means MODEL_DIR points one level off.
SNAPSHOT_MARKER = "config.json"


def _check_env_names(plan: LaunchPlan) -> None:
    cluster_env = [e.name for e in plan.cluster.env] if plan.cluster else []
    for name in [e.name for e in plan.env] + [r.env for r in plan.required] + cluster_env:
        if not _ENV_NAME.fullmatch(name):
            raise RenderError(
                f"environment variable name {name!r} is not a valid shell name",
                hint="fix the key in server.extra_env of the target file (letters, digits, _; not starting with a digit)",
            )


def launch_context(*, cfg: ReleaseConfig, plan: LaunchPlan) -> dict:
    _check_env_names(plan)
    return {
        "cfg": cfg,
        "plan": plan,
        "engine": cfg.engine.resolved,
        "version": builder.__version__,
        "digest": config_digest(cfg),
        "env_lines": [f"export {e.name}={shlex.quote(e.value)}" for e in plan.env],
        "knobs": SCRIPT_KNOBS,
        "dry_run_env": ENV_DRY_RUN,
        "python_env": ENV_LAUNCH_PYTHON,
        "snapshot_marker": {MODEL_DIR_ENV: SNAPSHOT_MARKER} if cfg.model.source == "hub-snapshot" else {},
        "script_name": LAUNCH_SCRIPT_NAME,
        "script_basename": Path(LAUNCH_SCRIPT_NAME).name,
        "cluster": plan.cluster,
        "cluster_module": Path(LAUNCH_CLUSTER_NAME).name,
        "head_script_name": LAUNCH_HEAD_SCRIPT_NAME,
        "worker_script_name": LAUNCH_WORKER_SCRIPT_NAME,
        "model_env": MODEL_DIR_ENV,
        "middleware_module": Path(LAUNCH_MIDDLEWARE_NAME).stem,
    }


def render_launch(
    *, cfg: ReleaseConfig, plan: LaunchPlan, env: jinja2.Environment | None = None,
    launch_dir: Path = LAUNCH_TEMPLATES_DIR,
) -> dict[str, str]:
    """{bundle-relative path: text} for the launch script, its ENV.md, the compose file(s) and the Kubernetes
    manifests; a multi-node target adds its head and worker scripts and the cluster helper they run."""
    env = env or make_environment()
    ctx = launch_context(cfg=cfg, plan=plan)
    files = {
        LAUNCH_SCRIPT_NAME: render_template(env, "run_qsa_int8kv.sh.j2", ctx),
        LAUNCH_ENV_DOC_NAME: render_template(env, "ENV.md.j2", ctx),
        LAUNCH_MIDDLEWARE_NAME: (launch_dir / Path(LAUNCH_MIDDLEWARE_NAME).name).read_text(),
        **compose_files(plan, target=cfg.target.name),
        **k8s_manifests(cfg, plan),
    }
    if plan.cluster is not None:
        files[LAUNCH_HEAD_SCRIPT_NAME] = render_template(env, "run_head.sh.j2", ctx)
        files[LAUNCH_WORKER_SCRIPT_NAME] = render_template(env, "run_worker.sh.j2", ctx)
        files[LAUNCH_CLUSTER_NAME] = (launch_dir / Path(LAUNCH_CLUSTER_NAME).name).read_text()
    return files
