"""How the engine harness gets to a GPU and back: what the measurement driver needs from where it runs.

A transport says which interpreter runs the servers and the model generator and with which environment
(the engine, its site packages, the repo tree and the launch folder), where the tokenizer and the
state (model, Triton's cache, server inputs) live, where a run's results are written and how they go
back. `driver.measure` asks nothing else of it.

  chunked.py  the payload cut into pieces, one per command of a remote runner, landed and installed on
              the GPU host; results packed into a few files the runner returns
  local.py    an existing environment: a python that already has the patched vLLM; results written
              straight to --out

Imports only the standard library: the chunked transport's `land` runs before any wheel is installed.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path

from builder.constants import ENV_REPO_ROOT, LAUNCH_TEMPLATES_DIR, REPO_ROOT

#: Triton's compile cache, under the state: a cold cache costs each server start ~140 s on the H200.
TRITON_CACHE = "triton-cache"


class Transport(ABC):
    """What the driver needs: `python`, `state`, `tokenizer`, `env()`, and the four steps below."""

    #: The name the summary records the transport under.
    name: str
    #: The interpreter of the servers and the model generator.
    python: str
    #: Kept between runs: the generated model, Triton's cache, the folders a launch requires.
    state: Path
    #: The tokenizer the model generator builds the small model around.
    tokenizer: Path

    @property
    def model_dir(self) -> Path:
        return self.state / "model"

    def python_paths(self, *, graphs: bool = False) -> list[str]:
        """What goes in front of the interpreter's own packages (the engine, its site packages)."""
        return []

    def extra_env(self) -> dict[str, str]:
        return {}

    def env(self, *, graphs: bool = False) -> dict[str, str]:
        """The environment of every process the driver starts: the transport's paths in front, then the
        repo tree and the launch folder, as the rendered launch script sets them (the plan's
        --middleware lives there). `graphs`: what CUDA graphs need besides (the chunked transport's
        nvidia-cutlass-dsl)."""
        env = dict(os.environ)
        paths = [*self.python_paths(graphs=graphs), str(REPO_ROOT), str(LAUNCH_TEMPLATES_DIR)]
        env["PYTHONPATH"] = ":".join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env[ENV_REPO_ROOT] = str(REPO_ROOT)
        env["PYTHONUNBUFFERED"] = "1"
        env["TRITON_CACHE_DIR"] = str(self.state / TRITON_CACHE)
        env.update(self.extra_env())
        return env

    @abstractmethod
    def ready(self, summary: dict, *, graphs: bool = False) -> None:
        """Make the environment ready to serve and record what that took in `summary`; raise with the
        cause when it cannot serve."""

    @abstractmethod
    def results_dir(self) -> Path:
        """An empty folder for this run's results (server logs, gate evidence, bench cells)."""

    @abstractmethod
    def deliver(self, work: Path, summary: dict) -> None:
        """Hand the results so far back; called after every phase, so a run stopped midway keeps them."""

    def finish(self, servers: dict, summary: dict) -> None:
        """After the servers stopped, before the last delivery: what the transport keeps or trims."""
