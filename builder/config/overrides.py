"""One `builder serve` run's additions to a target's launch plan: --env, extra vLLM flags, CORS
origins and log level. `launch_plan(cfg, overrides=...)` turns them into plan entries."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from builder.constants import ENV_VLLM_API_KEY
from builder.errors import ConfigError

LogLevel = Literal["debug", "info", "warning", "error"]

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Flags `builder serve` owns itself: the port mapping, and the key that must not be on a command line.
_SERVE_OWNED_FLAGS = {"--port": "pass --port to builder serve (the host port)", "--host": "use --bind",
                      "--api-key": "export VLLM_API_KEY instead: a command line is visible in `ps` and `docker inspect`"}


class LaunchOverrides(BaseModel):
    """What one `builder serve` run adds to the target's plan; never baked into an image or bundle."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    env: dict[str, str] = Field(default_factory=dict, description="`--env K=V`: extra variables for the engine.")
    extra_args: list[str] = Field(default_factory=list, description="`-- FLAGS`: extra vLLM flags, appended.")
    cors_origins: list[str] = Field(default_factory=list, description="`--cors-origin`: browser origins allowed.")
    log_level: LogLevel | None = Field(default=None, description="`--log-level`: engine and HTTP log level.")

    @classmethod
    def parse(cls, *, env: list[str], extra_args: list[str], cors_origins: list[str], log_level: str | None) -> LaunchOverrides:
        """From `builder serve` options; bad ones raise ConfigError naming the option and the fix."""
        pairs: dict[str, str] = {}
        for item in env:
            name, sep, value = item.partition("=")
            if not sep or not _ENV_NAME.match(name):
                raise ConfigError(f"--env {item!r} is not NAME=VALUE with a shell variable name",
                                  hint="write it as --env NAME=VALUE, e.g. --env VLLM_CPU_KVCACHE_SPACE=4")
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
        return cls(env=pairs, extra_args=list(extra_args), cors_origins=list(cors_origins), log_level=log_level)
