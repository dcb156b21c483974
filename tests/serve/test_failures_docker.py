"""The wait's failure paths against real containers: exits at once, never opens its port, 503."""

from __future__ import annotations

import calendar
import time

import pytest

from builder.errors import ServeError
from builder.serve.container import RunSpec, check_alive, remove_container, start_container
from builder.serve.wait import wait_ready

pytestmark = [pytest.mark.docker]

# A server that is up but whose engine is dead: /health answers 503, like vLLM's.
DEAD_ENGINE = """
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503 if self.path == "/health" else 404)
        self.end_headers()
http.server.HTTPServer(("0.0.0.0", 8000), H).serve_forever()
"""


def _spec(image: str, port: int, command: list[str], memory: str | None = None) -> RunSpec:
    return RunSpec(
        image=image,
        name=f"qfn-int8kv-test-{port}",
        command=command,
        environment={},
        ports={"8000/tcp": ("127.0.0.1", port)},
        mounts=[],
        gpus=0,
        ipc_mode=None,
        shm_size=None,
        cap_add=[],
        labels={"org.qfn-int8kv.test": "serve"},
        memory=memory,
    )


@pytest.fixture
def run(docker_client, base_image, free_port):
    started = []

    def go(command, memory=None):
        c = start_container(client=docker_client, spec=_spec(base_image, free_port, command, memory))
        started.append(c)
        return c, f"http://127.0.0.1:{free_port}"

    yield go
    for c in started:
        remove_container(c, timeout_s=1)


def test_container_that_exits_at_once_fails_fast_with_its_log(run):
    container, url = run(["sh", "-c", "echo engine exploded: CUDA out of memory; exit 3"])
    start = time.monotonic()
    with pytest.raises(ServeError) as err:
        wait_ready(url=url, served_name="m", timeout_s=120, alive=lambda: check_alive(container), poll_s=0.5)
    assert time.monotonic() - start < 30
    assert "exit code 3" in err.value.message
    assert "engine exploded: CUDA out of memory" in err.value.message


def test_container_that_never_opens_its_port_times_out(run):
    container, url = run(["sleep", "600"])
    start = time.monotonic()
    with pytest.raises(ServeError) as err:
        wait_ready(url=url, served_name="m", timeout_s=6, alive=lambda: check_alive(container), poll_s=0.5)
    assert 6 <= time.monotonic() - start < 30
    assert "not ready after 6 s" in err.value.message
    assert "port closed" in err.value.message


def test_dead_engine_503_fails_now(run):
    container, url = run(["python3", "-c", DEAD_ENGINE])
    start = time.monotonic()
    with pytest.raises(ServeError) as err:
        wait_ready(url=url, served_name="m", timeout_s=120, alive=lambda: check_alive(container), poll_s=0.5)
    assert time.monotonic() - start < 30
    assert "503" in err.value.message


# Allocates well past its 64 MiB cap while "loading", like a model load that runs out of memory.
OOM_COMMAND = ["python3", "-c", "x = b\"x\" * (512 << 20); import time; time.sleep(600)"]
#: Kills tried before concluding the daemon never records an OOM here (containerd can miss one
#: when the cgroup is gone before its watcher reads it; then there is nothing to name).
OOM_TRIES = 3


def _daemon_recorded_oom(container) -> bool:
    """Ground truth, read after the wait has judged: docker's own flag now, or its "oom" event
    within a window far longer than serve waits. A kill the daemon never recorded proves nothing."""
    container.reload()
    if container.attrs["State"].get("OOMKilled"):
        return True
    created = container.attrs["Created"][:19]
    since = calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%S")) - 1
    events = container.client.events(since=since, until=int(time.time()) + 30,
                                     filters={"container": container.id, "event": "oom"}, decode=True)
    try:
        return any(True for _ in events)
    finally:
        events.close()


def _oom_message(run, wrap) -> str:
    """The wait's message for an OOM kill the daemon recorded (the flag read through `wrap`)."""
    for _ in range(OOM_TRIES):
        container, url = run(OOM_COMMAND, memory="64m")
        with pytest.raises(ServeError) as err:
            wait_ready(url=url, served_name="m", timeout_s=120, alive=lambda: check_alive(wrap(container)), poll_s=0.5)
        if _daemon_recorded_oom(container):
            return err.value.message
        assert "OOMKilled" not in err.value.message  # nothing recorded: nothing may be claimed either
        remove_container(container, timeout_s=1)  # the next try takes its name and port
    pytest.fail(f"the docker daemon recorded none of {OOM_TRIES} OOM kills (no flag, no 'oom' event)")


def test_oom_killed_container_is_named_as_such(run):
    assert "OOMKilled" in _oom_message(run, wrap=lambda c: c)


class _FlagLost:
    """A real container whose docker-side OOMKilled flag reads false, as when containerd's exit
    event reaches the daemon before its OOM event (a CI run saw exit 137 with the flag false)."""

    def __init__(self, container):
        self._c = container

    def __getattr__(self, name):
        return getattr(self._c, name)

    def reload(self):
        self._c.reload()
        self._c.attrs["State"]["OOMKilled"] = False


def test_oom_kill_is_named_even_when_dockers_flag_lost_the_race(run):
    assert "OOMKilled" in _oom_message(run, wrap=_FlagLost)  # from the daemon's "oom" event


def test_a_plain_sigkill_is_not_called_an_oom_kill(run):
    """The control: exit 137 without an oom event stays 'exit code 137'."""
    container, url = run(["sleep", "600"])
    container.kill(signal="SIGKILL")
    start = time.monotonic()
    with pytest.raises(ServeError) as err:
        wait_ready(url=url, served_name="m", timeout_s=120, alive=lambda: check_alive(container), poll_s=0.5)
    assert "exit code 137" in err.value.message and "OOMKilled" not in err.value.message
    assert time.monotonic() - start < 30
