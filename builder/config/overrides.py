"""One `builder serve` run's additions to a target's launch plan: --env, extra vLLM flags, CORS
origins and log level. `launch_plan(cfg, overrides=...)` turns them into plan entries."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from builder.constants import ENV_VLLM_API_KEY, LAUNCH_RESERVED_ENV
from builder.errors import ConfigError

if TYPE_CHECKING:  # launch imports this module
    from builder.config.launch import LaunchPlan

LogLevel = Literal["debug", "info", "warning", "error"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Flags `builder serve` owns itself: the port mapping, and the key that must not be on a command line.
_SERVE_OWNED_FLAGS = {"--port": "pass --port to builder serve (the host port)", "--host": "use --bind",
                      "--api-key": "export VLLM_API_KEY instead: a command line is visible in `ps` and `docker inspect`"}
#: Reserved names that another `builder serve` option sets: the fix is that option.
_ENV_OPTIONS = {"MODEL_DIR": "pass --model-dir DIR", "VLLM_PLE_MMAP_TABLE_DIR": "pass --ple-dir DIR",
                "VLLM_LOGGING_LEVEL": "pass --log-level LEVEL"}


class LaunchOverrides(BaseModel):
    """What one `builder serve` run adds to the target's plan; never baked into an image or bundle."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    env: dict[str, str] = Field(default_factory=dict, description="`--env K=V`: extra variables for the engine.")
    extra_args: list[str] = Field(default_factory=list, description="`-- FLAGS`: extra vLLM flags, appended.")
    cors_origins: list[str] = Field(default_factory=list, description="`--cors-origin`: browser origins allowed.")
    log_level: LogLevel | None = Field(default=None, description="`--log-level`: engine and HTTP log level.")

    @classmethod
    def parse(
        cls, *, env: list[str], extra_args: list[str], cors_origins: list[str], log_level: str | None,
        target_env: Collection[str] = (),
    ) -> LaunchOverrides:
        """From `builder serve` options; bad ones raise ConfigError naming the option and the fix.

        ``target_env``: the names the target's own launch plan sets (`reserved_by_target`).
        """
        pairs: dict[str, str] = {}
        for item in env:
            name, sep, value = item.partition("=")
            if not sep or not _ENV_NAME.match(name):
                raise ConfigError(f"--env {item!r} is not NAME=VALUE with a shell variable name",
                                  hint="write it as --env NAME=VALUE, e.g. --env NCCL_DEBUG=INFO")
            if name == ENV_VLLM_API_KEY:
                raise ConfigError("--env VLLM_API_KEY=... would put the key on a command line",
                                  hint="export VLLM_API_KEY in the shell that runs builder serve; serve passes it on unprinted")
            pairs[name] = value
        for arg in extra_args:
            owned = _SERVE_OWNED_FLAGS.get(arg.split("=", 1)[0])
            if owned:
                raise ConfigError(f"extra vLLM flag {arg.split('=', 1)[0]} is set by builder serve itself", hint=owned)
        if log_level is not None and log_level not in LogLevel.__args__:
            raise ConfigError(f"--log-level {log_level!r} is not one of {', '.join(LogLevel.__args__)}", hint="pick one of those")
        overrides = cls(env=pairs, extra_args=list(extra_args), cors_origins=list(cors_origins), log_level=log_level)
        overrides.refuse_reserved_env(target_env)
        return overrides

    def refuse_reserved_env(self, target_env: Collection[str] = ()) -> None:
        """The rule server.extra_env follows (LAUNCH_RESERVED_ENV), plus what this target's launch sets.

        The launch script exports its plan's variables over whatever docker passed in, and reads
        the reserved ones itself: an --env of either would be silently overwritten or change what runs.
        """
        for name in self.env:
            if name == "VLLM_LOGGING_LEVEL" and self.log_level is not None:
                raise ConfigError(f"--env {name} and --log-level both set the engine's log level",
                                  hint=f"drop --env {name}; --log-level sets it")
            if name in LAUNCH_RESERVED_ENV:
                raise ConfigError(
                    f"--env {name} is read or set by the launch itself (its caller's knobs, its inputs, what bash "
                    "reads, or what the config sets through other fields), so passing it could change what runs",
                    hint=_ENV_OPTIONS.get(name, f"drop --env {name}; set the target field that controls it instead"),
                )
            if name in target_env:
                raise ConfigError(
                    f"--env {name} is set by the target's own launch script, which would overwrite it",
                    hint=_ENV_OPTIONS.get(name, f"drop --env {name}; change it in the target file (server.extra_env "
                                                "or the field that sets it) and rebuild the image"),
                )


def reserved_by_target(plan: LaunchPlan) -> frozenset[str]:
    """Every environment name a target's launch plan sets or passes: its exported variables, the
    container's mount variables and pass-through names, and the script's required inputs."""
    box = plan.container
    return frozenset({e.name for e in plan.env if e.origin == "target"} | set(box.environment)
                     | set(box.passthrough_env) | {r.env for r in plan.required})
