"""`serve --stop` removes exactly the container the user names (default qfn-int8kv-<target>), never
every container of the target: other serve runs and tests start theirs under their own names."""

from __future__ import annotations

import pytest
from docker.errors import NotFound

from builder.constants import SERVE_LABEL
from builder.errors import ServeError
from builder.serve import container_name, stop

pytestmark = [pytest.mark.docker]


@pytest.fixture
def started(docker_client, base_image):
    made = []

    def start(name: str, labels: dict[str, str]):
        made.append(docker_client.containers.run(base_image, ["sleep", "600"], name=name, labels=labels, detach=True))
        return made[-1]

    yield start
    for c in made:
        try:
            c.remove(force=True)
        except NotFound:
            pass


def _exists(docker_client, name: str) -> bool:
    try:
        docker_client.containers.get(name)
    except NotFound:
        return False
    return True


def test_stop_removes_only_the_named_container(docker_client, started, free_port):
    target = f"stoptest-{free_port}"  # a label no other run on this daemon uses
    default = container_name(target=target)
    started(default, {SERVE_LABEL: target})
    started(f"{default}-other-run", {SERVE_LABEL: target})
    started(f"{default}-session", {SERVE_LABEL: target})

    assert stop(target=target) == default
    assert not _exists(docker_client, default)
    assert _exists(docker_client, f"{default}-other-run") and _exists(docker_client, f"{default}-session")

    assert stop(target=target, name=f"{default}-other-run") == f"{default}-other-run"
    assert _exists(docker_client, f"{default}-session")
    assert stop(target=target) is None  # nothing left under the default name: nothing to do


def test_stop_refuses_a_container_serve_did_not_start_for_that_target(docker_client, started, free_port):
    target = f"stoptest-{free_port}"
    stranger = started(f"qfn-int8kv-{target}", {"org.example.app": "db"})
    other_target = started(f"qfn-int8kv-{target}-b", {SERVE_LABEL: "another-target"})
    with pytest.raises(ServeError, match="was not started by `builder serve` for target"):
        stop(target=target)
    with pytest.raises(ServeError, match="leaving it alone"):
        stop(target=target, name=other_target.name)
    stranger.reload()
    other_target.reload()
    assert stranger.status == other_target.status == "running"
