"""`publish --timeout`: one budget for the whole Hub part; every call and backoff wait fits in it."""

from __future__ import annotations

import io
import threading
import time

import pytest
from rich.console import Console

from builder import constants
from builder.errors import PublishError, PublishNetworkError
from builder.publish import PublishRequest, publish
from tests.publish.conftest import FAKE_TOKEN, http_error, public_key
from tests.publish.test_real_client import SilentHub


@pytest.fixture
def silent(monkeypatch):
    import huggingface_hub.constants as hf_constants

    hub = SilentHub()
    monkeypatch.setattr(hf_constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    yield hub
    hub.close()


@pytest.mark.timeout(60)
def test_a_hub_that_never_answers_ends_at_the_timeout_with_exit_63(bundle, silent, run_cli):
    """The real per-read timeout (60 s) and backoff are left as they are: --timeout alone bounds the run."""
    start = time.monotonic()
    code, out, err = run_cli("publish", str(bundle), "--repo", "qfn/release", "--public-key", str(public_key()), "--yes", "--timeout", "3")
    took = time.monotonic() - start
    text = " ".join(err.split())
    assert code == PublishNetworkError.exit_code == 63, out + err
    assert 2.5 < took < 10, took
    assert "--timeout of 3 s" in text and "create repo qfn/release" in text and "fix:" in text and "--timeout" in text.split("fix:")[1]
    assert FAKE_TOKEN not in out + err


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_a_bad_timeout_is_refused_before_anything_else(value, run_cli, silent, tmp_path):
    # The bundle does not exist: the --timeout refusal must come first.
    code, out, err = run_cli("publish", str(tmp_path / "no-bundle"), "--repo", "qfn/release", "--yes", "--timeout", value)
    assert code == PublishError.exit_code, out + err
    assert err.startswith("error: --timeout") and "fix:" in err
    assert not silent.connections


class _Clock:
    """A clock that moves only when the retry backoff sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_backoff_waits_are_cut_to_the_budget_left_and_no_retry_starts_after_it(hub):
    from builder.publish.hub import Deadline, Hub

    clock = _Clock()
    hub.api.fail["create_repo"] = [http_error(503) for _ in range(constants.PUBLISH_RETRY_ATTEMPTS)]
    client = Hub(hub(token=FAKE_TOKEN), repo="qfn/release", console=Console(file=io.StringIO()), sleep=clock.sleep,
                 attempts=constants.PUBLISH_RETRY_ATTEMPTS, initial_s=2.0, max_s=30.0,
                 deadline=Deadline(5.0, clock=clock))
    with pytest.raises(PublishNetworkError, match=r"ran out of its --timeout of 5 s while trying to create repo") as info:
        client.call("create repo qfn/release", "create_repo", "qfn/release")
    assert clock.sleeps == [2.0, 3.0]  # 2 s, then the 3 s left instead of 4 s
    assert hub.api.methods == ["create_repo"] * 2  # the budget was spent at the second wait: no third attempt
    assert "--timeout" in info.value.hint


def test_default_budget_leaves_the_retry_policy_as_it_was(bundle, hub):
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", public_key=public_key(), yes=True)
    assert request.timeout_s == constants.PUBLISH_TIMEOUT_S
    hub.api.fail["create_commit"] = [http_error(503), http_error(503)]
    sleeps: list[float] = []
    publish(request=request, console=Console(file=io.StringIO(), width=200), api_factory=hub, sleep=sleeps.append)
    assert sleeps == [constants.PUBLISH_RETRY_INITIAL_S, 2 * constants.PUBLISH_RETRY_INITIAL_S]


class TricklingHub(SilentHub):
    """Answers every request one byte every 0.2 s, for ever: no read ever waits long enough to time out."""

    def handle(self, conn) -> None:
        threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    @staticmethod
    def _trickle(conn) -> None:
        try:
            for byte in iter(lambda: b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 100000, None):
                for i in range(len(byte)):
                    conn.sendall(byte[i : i + 1])
                    time.sleep(0.2)
        except OSError:
            return


@pytest.mark.timeout(60)
def test_a_hub_that_trickles_its_answer_cannot_hold_publish_past_the_timeout(bundle, monkeypatch, run_cli):
    import huggingface_hub.constants as hf_constants

    hub = TricklingHub()
    monkeypatch.setattr(hf_constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    try:
        start = time.monotonic()
        code, out, err = run_cli("publish", str(bundle), "--repo", "qfn/release", "--public-key", str(public_key()), "--yes", "--timeout", "2")
        took = time.monotonic() - start
    finally:
        hub.close()
    assert code == 63 and "--timeout of 2 s" in " ".join(err.split()), out + err
    assert took < 8, took
