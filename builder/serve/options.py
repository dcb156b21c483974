"""Every `builder serve` value checked before serve acts: no model is prepared, no docker daemon
contacted and no container removed for a run whose options could never work."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from builder.config import LaunchPlan, ReleaseConfig, launch_plan
from builder.config.overrides import LaunchOverrides, reserved_by_target
from builder.errors import ServeError
from builder.serve.container import container_name, ple_host_dir
from builder.serve.wait import check_timeout

#: docker's --memory grammar (a number, then b, k, m or g, an optional trailing b), and its floor.
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)(?:([kmg])b?|b)?", re.IGNORECASE)
_MEMORY_UNITS = {None: 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
DOCKER_MIN_MEMORY = 6 << 20


class ServeOptions(BaseModel):
    """One serve run's checked options and the launch plan they resolve to."""

    model_config = ConfigDict(frozen=True)

    model_dir: Path | None
    ple_dir: Path | None
    bind: str
    host_port: int | None
    timeout_s: float
    name: str
    memory: str | None
    plan: LaunchPlan

    @classmethod
    def parse(
        cls, *, cfg: ReleaseConfig, model_dir: Path | None, ple_dir: Path | None, bind: str, host_port: int | None,
        timeout_s: float, name: str | None, memory: str | None, overrides: LaunchOverrides | None,
    ) -> ServeOptions:
        """Raise the error of the first bad option (naming it and the fix); touches no file but stats."""
        if cfg.cluster.nodes > 1:
            raise ServeError(
                f"target {cfg.target.name} spans {cfg.cluster.nodes} hosts; `builder serve` runs one container on this host",
                hint="start the image on each host as its role (docker run ... IMAGE head / worker, or "
                "launch/compose.head.yaml and compose.worker.yaml of its bundle; docs/images.md shows the lines), "
                "then `builder wait --url http://HEAD:PORT`",
            )
        timeout_s = check_timeout(timeout_s)
        try:
            ipaddress.ip_address(bind)
        except ValueError:
            raise ServeError(f"--bind {bind!r} is not an IP address of this host",
                             hint="e.g. --bind 127.0.0.1 (this host only) or --bind 0.0.0.0 (every interface)") from None
        if host_port is not None and not 1 <= host_port <= 65535:
            raise ServeError(f"--port {host_port} is not a TCP port", hint="pass a port from 1 to 65535")
        checked_name = container_name(target=cfg.target.name, name=name)
        if memory is not None:
            check_memory(memory)
        if overrides is not None:
            overrides.refuse_reserved_env(reserved_by_target(launch_plan(cfg)))
        plan = launch_plan(cfg, overrides=overrides)
        ple_dir = ple_host_dir(cfg=cfg, plan=plan, ple_dir=ple_dir)
        for option, path in (("--model-dir", model_dir), ("--ple-dir", ple_dir)):
            if path is not None and not path.is_dir():
                raise ServeError(f"{option} {path} is not a directory",
                                 hint=f"pass an existing directory to {option}")
        return cls(model_dir=model_dir, ple_dir=ple_dir, bind=bind, host_port=host_port, timeout_s=timeout_s,
                   name=checked_name, memory=memory, plan=plan)


def check_memory(memory: str) -> int:
    """Bytes of a docker --memory value; docker's own parse would fail only at `docker run`."""
    match = _MEMORY.fullmatch(memory.strip())
    if match is None:
        raise ServeError(f"--memory {memory!r} is not a size docker takes",
                         hint="a number with b, k, m or g, e.g. --memory 100g")
    size = int(float(match[1]) * _MEMORY_UNITS[match[2].lower() if match[2] else None])
    if size < DOCKER_MIN_MEMORY:
        raise ServeError(f"--memory {memory!r} is below docker's minimum of 6 MiB", hint="e.g. --memory 100g")
    return size
