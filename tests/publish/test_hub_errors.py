"""Hub failures: which are retried, what the user is told, and that the token never leaks."""

from __future__ import annotations

import io
import logging
import tempfile
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi
from huggingface_hub.errors import OfflineModeIsEnabled
from rich.console import Console

from builder import constants
from builder.errors import PublishAuthError, PublishError, PublishNetworkError, PublishPermissionError
from builder.publish import PublishRequest, publish
from tests.publish.conftest import FAKE_TOKEN, http_error, public_key


def upload(bundle: Path, factory, *, sleeps: list[float] | None = None) -> str:
    out = io.StringIO()
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", public_key=public_key(), yes=True)
    sleeper = (sleeps.append if sleeps is not None else lambda s: None)
    try:
        publish(request=request, console=Console(file=out, width=200), api_factory=factory, sleep=sleeper)
    finally:
        upload.output = out.getvalue()  # type: ignore[attr-defined]
    return out.getvalue()


@pytest.mark.parametrize("status", [503, 502, 500, 429])
def test_transient_errors_are_retried_with_backoff_then_succeed(bundle, hub, status):
    url = "https://huggingface.co/api/models/qfn/release/commit/main"
    hub.api.fail["create_commit"] = [http_error(status, url=url), http_error(status, url=url)]
    sleeps: list[float] = []
    out = upload(bundle, hub, sleeps=sleeps)
    assert hub.api.methods == ["create_repo", "list_repo_refs", "list_repo_files", "create_commit", "create_commit", "create_commit", "create_tag"]
    assert sleeps == [constants.PUBLISH_RETRY_INITIAL_S, 2 * constants.PUBLISH_RETRY_INITIAL_S]
    assert f"HTTP {status}; retry 2/{constants.PUBLISH_RETRY_ATTEMPTS}" in out
    assert "published:" in out


def test_connection_errors_are_retried(bundle, hub):
    hub.api.fail["create_repo"] = [httpx2.ConnectError("connection refused")]
    sleeps: list[float] = []
    upload(bundle, hub, sleeps=sleeps)
    assert hub.api.methods[:2] == ["create_repo", "create_repo"] and len(sleeps) == 1


def test_persistent_503_gives_a_network_error_after_every_attempt(bundle, hub):
    hub.api.fail["create_repo"] = [http_error(503) for _ in range(constants.PUBLISH_RETRY_ATTEMPTS)]
    sleeps: list[float] = []
    with pytest.raises(PublishNetworkError, match=f"kept answering 503 .* after {constants.PUBLISH_RETRY_ATTEMPTS} attempts"):
        upload(bundle, hub, sleeps=sleeps)
    assert hub.api.methods == ["create_repo"] * constants.PUBLISH_RETRY_ATTEMPTS
    assert sleeps == sorted(sleeps) and max(sleeps) <= constants.PUBLISH_RETRY_MAX_S


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        (http_error(403, message="You don't have the rights to create a model under the namespace \"qfn\""), PublishPermissionError, "may not write to qfn/release"),
        (http_error(401, message="Invalid credentials in Authorization header"), PublishAuthError, "rejected the token"),
        (http_error(401, url="https://huggingface.co/api/models/qfn/release/commit/main"), PublishPermissionError, "not visible to this token"),
        (http_error(400, message="Invalid tag name"), PublishError, "refused to create repo"),
    ],
)
def test_client_errors_are_not_retried_and_say_what_to_fix(bundle, hub, error, kind, message):
    hub.api.fail["create_repo"] = [error]
    sleeps: list[float] = []
    with pytest.raises(kind, match=message) as info:
        upload(bundle, hub, sleeps=sleeps)
    assert type(info.value) is kind
    assert hub.api.methods == ["create_repo"] and sleeps == []
    assert FAKE_TOKEN not in str(info.value) + (info.value.hint or "")


def test_offline_mode_is_named_and_not_retried(bundle, hub):
    hub.api.fail["create_repo"] = [OfflineModeIsEnabled("HF_HUB_OFFLINE=1")]
    sleeps: list[float] = []
    with pytest.raises(PublishNetworkError, match="offline mode") as info:
        upload(bundle, hub, sleeps=sleeps)
    assert "HF_HUB_OFFLINE" in info.value.hint and sleeps == [] and hub.api.methods == ["create_repo"]


def test_a_branch_that_moved_under_the_commit_is_refused_not_retried(bundle, hub):
    url = "https://huggingface.co/api/models/qfn/release/commit/main"
    hub.api.fail["create_commit"] = [http_error(412, url=url, message="A commit has happened since")]
    sleeps: list[float] = []
    with pytest.raises(PublishError, match="branch moved on qfn/release while trying to commit") as info:
        upload(bundle, hub, sleeps=sleeps)
    assert "re-run" in info.value.hint and sleeps == [] and "create_tag" not in hub.api.methods


def test_permission_error_on_the_commit_stops_before_the_tag(bundle, hub):
    hub.api.fail["create_commit"] = [http_error(403, url="https://huggingface.co/api/models/qfn/release/commit/main")]
    with pytest.raises(PublishPermissionError):
        upload(bundle, hub)
    assert hub.api.methods[-1] == "create_commit" and "create_tag" not in hub.api.methods


def test_no_token_is_refused_before_any_hub_call(bundle):
    calls: list[object] = []
    with pytest.raises(PublishAuthError, match="no Hugging Face token") as info:
        upload(bundle, lambda **kw: calls.append(kw))
    assert calls == [] and "HF_TOKEN" in info.value.hint


def test_token_from_the_login_cache_is_used(bundle, hub, monkeypatch, tmp_path):
    import huggingface_hub.constants as hf_constants

    monkeypatch.delenv(constants.ENV_HF_TOKEN)
    (tmp_path / "hf-home").mkdir()
    Path(hf_constants.HF_TOKEN_PATH).write_text(FAKE_TOKEN + "\n")
    out = upload(bundle, hub)
    assert hub.tokens == [FAKE_TOKEN] and "login cache" in out


def test_real_client_against_an_unreachable_hub_gives_a_network_error(bundle, monkeypatch):
    """The real HfApi, not the fake: its connection failure is retried, then named as a network error."""
    monkeypatch.setenv(constants.ENV_HF_TOKEN, FAKE_TOKEN)
    sleeps: list[float] = []
    factory = lambda *, token: HfApi(endpoint="http://127.0.0.1:9", token=token)  # noqa: E731 - port 9 (discard) is closed
    with pytest.raises(PublishNetworkError, match="cannot reach the Hub to create repo"):
        upload(bundle, factory, sleeps=sleeps)
    assert len(sleeps) == constants.PUBLISH_RETRY_ATTEMPTS - 1


def test_token_never_appears_in_output_logs_or_files(bundle, hub, tmp_path, capfd, caplog, monkeypatch):
    """Every path that holds the token: dry run, upload with retries, a 401, the real client failing."""
    caplog.set_level(logging.DEBUG)
    staging = tmp_path / "system-tmp"
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))  # the staged copy is written here
    outputs: list[str] = []
    request = PublishRequest.parse(bundle_dir=bundle, repo="qfn/release", public_key=public_key(), allow_failed_gates=True)
    publish(request=request, api_factory=hub)  # dry run, default console (real stdout)
    hub.api.fail["create_commit"] = [http_error(503, url="https://huggingface.co/api/models/qfn/release/commit/main")]
    outputs.append(upload(bundle, hub))
    hub.api.fail["create_repo"] = [http_error(401, message="Invalid credentials in Authorization header")]
    with pytest.raises(PublishAuthError) as auth:
        upload(bundle, hub)
    outputs += [upload.output, str(auth.value), auth.value.hint or ""]  # type: ignore[attr-defined]
    real = lambda *, token: HfApi(endpoint="http://127.0.0.1:9", token=token)  # noqa: E731
    with pytest.raises(PublishNetworkError) as net:
        upload(bundle, real)
    outputs += [upload.output, str(net.value)]  # type: ignore[attr-defined]
    captured = capfd.readouterr()
    outputs += [captured.out, captured.err, caplog.text]
    assert hub.tokens and set(hub.tokens) == {FAKE_TOKEN}, "the token did reach the client"
    for text in outputs:
        assert FAKE_TOKEN not in text
    written = [p for root in (tmp_path, bundle) for p in root.rglob("*") if p.is_file()]
    assert written
    for path in written:
        assert FAKE_TOKEN.encode() not in path.read_bytes(), path
    assert list(staging.iterdir()) == [], "the staged copy is removed"
