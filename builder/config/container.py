"""The container half of the launch plan: what `docker run` needs around the launch script.

`builder serve`, the documented `docker run` line and the bundle's compose.yaml all read this
one model, so a GPU reservation, a shm size or a mount cannot differ between them.
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel, ConfigDict, Field

import builder
from builder.config.models import ReleaseConfig
from builder.config.ple import PLE_TABLE_DIR_ENV, maps_ple_table
from builder.constants import (
    CONTAINER_MODEL_DIR,
    CONTAINER_PLE_DIR,
    ENV_VLLM_API_KEY,
    IMAGE_REPO,
    SERVE_WAIT_TIMEOUT_S,
)

#: Shared memory a CPU container gets (GPU containers share the host's IPC namespace instead).
CPU_SHM_SIZE = "1g"
#: The smallest /dev/shm the launch script accepts before starting the engine: vLLM's
#: shared-memory broadcast and tensor arena fail only after the model load (~45 s on cpu-smoke,
#: much longer on a GPU host) when docker's 64 MiB default is left in place.
MIN_SHM_MIB = 512
#: vLLM drains in-flight requests for this long on SIGTERM (--shutdown-timeout), then aborts
#: the rest, which ends their streams.
DRAIN_S = 5
#: Seconds `docker stop` (and compose's stop_grace_period) waits before SIGKILL: the drain,
#: then the supervisor's own grace for the HTTP side, with room to spare.
STOP_TIMEOUT_S = 30
#: Seconds a CPU server may take to load before the healthcheck counts failures.
CPU_HEALTH_START_PERIOD_S = 600


def image_tag(cfg: ReleaseConfig, *, version: str = builder.__version__) -> str:
    """The served image of a target: qfn-int8kv:<target>-<builder version>."""
    return f"{IMAGE_REPO}:{cfg.target.name}-{version}"


class ContainerMount(BaseModel):
    """A host folder mounted into the container; the host side is named by an environment variable."""

    model_config = ConfigDict(frozen=True)
    host_env: str = Field(description="Host variable holding the folder to mount, e.g. MODEL_DIR.")
    path: str = Field(description="Mount point inside the container.")
    container_env: str = Field(description="Variable set to the mount point inside the container.")
    read_only: bool = Field(default=True, description="Mounted read-only; only the PLE table-file folder is written.")
    why: str


class ContainerPlan(BaseModel):
    """How the served image is run: devices, shared memory, mounts, port, stop and health timing."""

    model_config = ConfigDict(frozen=True)
    image: str
    name: str = Field(description="Default container name.")
    port: int = Field(description="Port the server listens on inside the container.")
    gpus: int = Field(description="GPUs requested (docker --gpus / compose device reservation); 0 on CPU.")
    ipc_host: bool = Field(description="Share the host's IPC namespace: vLLM's mp executor passes tensors through shared memory.")
    shm_size: str | None = Field(description="--shm-size when the IPC namespace is not the host's.")
    min_shm_mib: int = Field(description="The launch script refuses a smaller /dev/shm at once, saying what to pass.")
    cap_add: list[str] = Field(description="Capabilities added (SYS_PTRACE: the PLE offload worker uses pidfd_getfd).")
    mounts: list[ContainerMount]
    passthrough_env: list[str] = Field(description="Variables passed from the caller's environment by name, never by value.")
    drain_s: int = Field(description="vLLM --shutdown-timeout: seconds in-flight requests may finish on SIGTERM.")
    stop_timeout_s: int = Field(description="docker stop / compose stop_grace_period before SIGKILL.")
    health_start_period_s: int = Field(description="Healthcheck start period: how long loading may take.")
    restart: str = Field(default="unless-stopped", description="Restart policy: an engine death exits non-zero and restarts.")

    @property
    def environment(self) -> dict[str, str]:
        """Fixed variables inside the container: each mount's path."""
        return {m.container_env: m.path for m in self.mounts}


def default_container_name(target: str) -> str:
    """The container name serve, stop, docker run and compose use unless told another."""
    return f"qfn-int8kv-{target}"


def container_plan(cfg: ReleaseConfig, *, series: Collection[str] | None = None) -> ContainerPlan:
    """``series`` (patch names) defaults to bundle/patches/series: it decides the PLE table-file mount."""
    t = cfg.target
    gpu = t.gpu_count > 0
    mounts = [
        ContainerMount(
            host_env="MODEL_DIR", path=CONTAINER_MODEL_DIR, container_env="MODEL_DIR",
            why=f"Local snapshot of {cfg.model.repo_id}@{cfg.model.revision}, mounted read-only.",
        )
    ]
    if maps_ple_table(cfg, series=series):
        mounts.append(
            ContainerMount(
                host_env="PLE_DIR", path=CONTAINER_PLE_DIR, container_env=PLE_TABLE_DIR_ENV, read_only=False,
                why="Host folder for the PLE table files the engine builds when the checkpoint's table cannot "
                "be mapped in place, mounted read-write; the engine writes only its own *.pletable files there.",
            )
        )
    return ContainerPlan(
        image=image_tag(cfg),
        name=default_container_name(t.name),
        port=cfg.server.port,
        gpus=t.gpu_count,
        ipc_host=gpu,
        shm_size=None if gpu else CPU_SHM_SIZE,
        min_shm_mib=MIN_SHM_MIB,
        cap_add=["SYS_PTRACE"] if cfg.ple.cpu_offload else [],
        mounts=mounts,
        passthrough_env=[ENV_VLLM_API_KEY],
        drain_s=DRAIN_S,
        stop_timeout_s=STOP_TIMEOUT_S,
        health_start_period_s=SERVE_WAIT_TIMEOUT_S if gpu else CPU_HEALTH_START_PERIOD_S,
    )
