"""`docker run` of a target's served image, and what the wait needs to know about it."""

from __future__ import annotations

from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.types import DeviceRequest, Mount
from pydantic import BaseModel, ConfigDict

from builder.config import ReleaseConfig, launch_plan
from builder.config.launch import MODEL_DIR_ENV, PLE_TABLE_DIR_ENV
from builder.constants import CONTAINER_MODEL_DIR, CONTAINER_PLE_DIR, SERVE_LABEL
from builder.errors import ServeError
from builder.serve.wait import LOG_TAIL_LINES

#: Shared memory for CPU targets (GPU targets share the host's IPC namespace instead).
CPU_SHM_SIZE = "1g"


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
    command: list[str]  # empty: the image's rendered launch script (entrypoint default)
    environment: dict[str, str]
    ports: dict[str, tuple[str, int]]
    mounts: list[BindMount]
    gpus: int
    ipc_mode: str | None
    shm_size: str | None
    cap_add: list[str]
    labels: dict[str, str]
    memory: str | None = None  # docker --memory: an OOM kill beats a host lock-up on unified memory


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
) -> RunSpec:
    t, srv = cfg.target, cfg.server
    mounts = [BindMount(host=str(model_dir.resolve()), container=CONTAINER_MODEL_DIR)]
    # The launch script baked into the image sets the plan's flags and env; it needs its inputs.
    env = {MODEL_DIR_ENV: CONTAINER_MODEL_DIR, "QFN_PORT": str(srv.port)}
    maps_ple = any(r.env == PLE_TABLE_DIR_ENV for r in launch_plan(cfg).required)
    if maps_ple:
        if ple_dir is None:
            raise ServeError(
                f"target {t.name} memory-maps its PLE table, and the engine needs a directory for the table "
                "files it builds when the checkpoint's table cannot be mapped in place",
                hint="pass --ple-dir DIR (a host directory with room for the table, ~102 GB at TP1); it is "
                "mounted read-write and the engine writes only its own *.pletable files there",
            )
        mounts.append(BindMount(host=str(ple_dir.resolve()), container=CONTAINER_PLE_DIR, read_only=False))
        env[PLE_TABLE_DIR_ENV] = CONTAINER_PLE_DIR
    elif ple_dir is not None:
        raise ServeError(
            f"--ple-dir was given, but target {t.name}'s launch does not memory-map a PLE table",
            hint="drop --ple-dir (the PLE table loads from the checkpoint in --model-dir)",
        )
    gpu = t.gpu_count > 0
    return RunSpec(
        image=image,
        name=name or f"qfn-int8kv-{t.name}",
        command=[],
        environment=env,
        ports={f"{srv.port}/tcp": (bind, host_port or srv.port)},
        mounts=mounts,
        gpus=t.gpu_count,
        # vLLM's mp executor passes tensors through shared memory: host IPC on GPU hosts.
        ipc_mode="host" if gpu else None,
        shm_size=None if gpu else CPU_SHM_SIZE,
        # The PLE offload worker takes the engine's fds with pidfd_getfd, which needs ptrace rights.
        cap_add=["SYS_PTRACE"] if cfg.ple.cpu_offload else [],
        labels={SERVE_LABEL: t.name},
        memory=memory,
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
            environment=spec.environment,
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
    why = "OOMKilled (out of memory)" if state.get("OOMKilled") else f"exit code {state.get('ExitCode')}"
    raise ServeError(
        f"container {container.name} stopped while starting: {why}\n"
        f"--- last {LOG_TAIL_LINES} log lines ---\n{logs_tail(container)}",
        hint="fix the error in the log above; an OOMKilled server needs more memory or a smaller KV pool",
    )


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
            hint=f"stop it first (`builder serve --stop --target ...` or `docker rm -f {name}`)",
        )
    old.remove(force=True)  # a leftover from an earlier failed start
