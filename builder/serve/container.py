"""`docker run` of a target's served image, and what the wait needs to know about it."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.types import DeviceRequest, Mount
from pydantic import BaseModel, ConfigDict, SecretStr

from builder.config import LaunchPlan, ReleaseConfig, launch_plan
from builder.config.container import default_container_name
from builder.config.launch import MODEL_DIR_ENV
from builder.constants import ENV_VLLM_API_KEY, OOM_EVENT_WAIT_S, SERVE_LABEL
from builder.errors import ServeError
from builder.serve.wait import LOG_TAIL_LINES


class BindMount(BaseModel):
    """A host directory bound into the container."""

    model_config = ConfigDict(frozen=True)

    host: str
    container: str
    read_only: bool = True


class RunSpec(BaseModel):
    """Everything `docker run` is given; pure data so tests check it without a daemon."""

    model_config = ConfigDict(frozen=True)

    image: str
    name: str
    command: list[str]  # flags appended to the image's rendered launch script (entrypoint); empty: none
    environment: dict[str, str]
    ports: dict[str, tuple[str, int]]
    mounts: list[BindMount]
    gpus: int
    ipc_mode: str | None
    shm_size: str | None
    cap_add: list[str]
    labels: dict[str, str]
    memory: str | None = None  # docker --memory: an OOM kill beats a host lock-up on unified memory
    # The API key: only ever handed to docker, never shown by repr, logs or model_dump_json.
    secret_environment: dict[str, SecretStr] = {}


#: docker's own rule for container names; a name it refuses would fail only once docker is asked.
_CONTAINER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]+")


def container_name(*, target: str, name: str | None = None) -> str:
    """The container `serve` starts (and `serve --stop` removes) for a target: --name, or qfn-int8kv-<target>."""
    if name is not None and not _CONTAINER_NAME.fullmatch(name):
        raise ServeError(
            f"--name {name!r} is not a docker container name",
            hint="use 2 or more letters, digits, '_', '.' or '-', starting with a letter or digit",
        )
    return name or default_container_name(target)


def ple_host_dir(*, cfg: ReleaseConfig, plan: LaunchPlan, ple_dir: Path | None) -> Path | None:
    """``ple_dir`` when the target's launch memory-maps a PLE table (then it is required), else None
    (then --ple-dir is refused)."""
    if any(m.host_env == "PLE_DIR" for m in plan.container.mounts):
        if ple_dir is None:
            raise ServeError(
                f"target {cfg.target.name} memory-maps its PLE table, and the engine needs a directory for the table "
                "files it builds when the checkpoint's table cannot be mapped in place",
                hint="pass --ple-dir DIR (a host directory with room for the table, ~102 GB at TP1); it is "
                "mounted read-write and the engine writes only its own *.pletable files there",
            )
        return ple_dir
    if ple_dir is not None:
        raise ServeError(
            f"--ple-dir was given, but target {cfg.target.name}'s launch does not memory-map a PLE table",
            hint="drop --ple-dir (the PLE table loads from the checkpoint in --model-dir)",
        )
    return None


def run_spec(
    *,
    cfg: ReleaseConfig,
    image: str,
    model_dir: Path,
    ple_dir: Path | None,
    bind: str,
    host_port: int | None,
    name: str | None = None,
    memory: str | None = None,
    plan: LaunchPlan | None = None,
    api_key: str | None = None,
) -> RunSpec:
    """``plan``: the target's launch plan, with one run's overrides (default: the target's own)."""
    t = cfg.target
    plan = plan or launch_plan(cfg)
    box = plan.container
    hosts = {MODEL_DIR_ENV: model_dir}
    ple_host = ple_host_dir(cfg=cfg, plan=plan, ple_dir=ple_dir)
    if ple_host is not None:
        hosts["PLE_DIR"] = ple_host
    mounts = [
        BindMount(host=str(hosts[m.host_env].resolve()), container=m.path, read_only=m.read_only) for m in box.mounts
    ]
    return RunSpec(
        image=image,
        name=container_name(target=t.name, name=name),
        command=plan.serve_args(),
        environment={**box.environment, **plan.serve_env()},
        ports={f"{box.port}/tcp": (bind, host_port or box.port)},
        mounts=mounts,
        gpus=box.gpus,
        ipc_mode="host" if box.ipc_host else None,
        shm_size=box.shm_size,
        cap_add=box.cap_add,
        labels={SERVE_LABEL: t.name},
        memory=memory,
        secret_environment={ENV_VLLM_API_KEY: SecretStr(api_key)} if api_key else {},
    )


def start_container(*, client: docker.DockerClient, spec: RunSpec) -> Container:
    for mount in spec.mounts:
        if not Path(mount.host).is_dir():
            raise ServeError(f"{mount.host} is not a directory", hint="pass an existing model (or PLE) directory")
    _refuse_or_clear_existing(client, spec.name)
    try:
        return client.containers.run(
            spec.image,
            spec.command or None,
            name=spec.name,
            detach=True,
            environment={**spec.environment, **{k: v.get_secret_value() for k, v in spec.secret_environment.items()}},
            ports=spec.ports,
            mounts=[Mount(target=m.container, source=m.host, type="bind", read_only=m.read_only) for m in spec.mounts],
            device_requests=[DeviceRequest(count=spec.gpus, capabilities=[["gpu"]])] if spec.gpus else None,
            ipc_mode=spec.ipc_mode,
            shm_size=spec.shm_size,
            cap_add=spec.cap_add or None,
            labels=spec.labels,
            mem_limit=spec.memory,
        )
    except ImageNotFound as exc:
        raise ServeError(
            f"image {spec.image} is not on this host", hint="build it first: `builder image --target <target>`"
        ) from exc
    except APIError as exc:
        raise ServeError(f"docker run of {spec.image} failed: {exc.explanation or exc}") from exc


def check_alive(container: Container) -> None:
    """Raise ServeError with the last log lines when the container has stopped."""
    container.reload()
    if container.status in ("created", "running", "restarting"):
        return
    state = container.attrs.get("State", {})
    why = "OOMKilled (out of memory)" if _oom_killed(container, state) else f"exit code {state.get('ExitCode')}"
    raise ServeError(
        f"container {container.name} stopped while starting: {why}\n"
        f"--- last {LOG_TAIL_LINES} log lines ---\n{logs_tail(container)}",
        hint="fix the error in the log above; an OOMKilled server needs more memory or a smaller KV pool",
    )


def _oom_killed(container: Container, state: dict) -> bool:
    """State.OOMKilled, or the daemon's own "oom" event for a SIGKILLed container.

    Docker sets the flag only when containerd's OOM event reaches it before the exit event; under
    load the exit can win (seen in a CI run: exit 137, flag false). The "oom" event is logged
    either way, if late, so a 137 waits briefly for it.
    """
    if state.get("OOMKilled"):
        return True
    if state.get("ExitCode") != 137:
        return False
    created = container.attrs.get("Created", "")[:19]  # RFC 3339 with nanoseconds: whole seconds suffice
    since = int(datetime.fromisoformat(created).replace(tzinfo=timezone.utc).timestamp()) if created else 0
    try:
        events = container.client.events(
            since=since, until=int(time.time()) + OOM_EVENT_WAIT_S,
            filters={"container": container.id, "event": "oom"}, decode=True,
        )  # fmt: skip
        try:
            return any(True for _ in events)
        finally:
            events.close()
    except APIError:
        return False


def logs_tail(container: Container, lines: int = LOG_TAIL_LINES) -> str:
    return container.logs(tail=lines).decode(errors="replace").rstrip()


def remove_container(container: Container, *, timeout_s: int = 10) -> None:
    """Stop (SIGTERM, then SIGKILL after timeout_s) and remove; a container already gone is fine."""
    try:
        container.stop(timeout=timeout_s)
    except NotFound:
        return
    try:
        container.remove(force=True)
    except NotFound:
        pass


def _refuse_or_clear_existing(client: docker.DockerClient, name: str) -> None:
    try:
        old = client.containers.get(name)
    except NotFound:
        return
    if old.status == "running":
        raise ServeError(
            f"a container named {name} is already running",
            hint=f"stop it first (`builder serve --stop --target <target> --name {name}`), or pass another --name",
        )
    old.remove(force=True)  # a leftover from an earlier failed start
