"""Talking to the Hub: the token from its standard places, retries on transient errors only, and
each Hub failure turned into an error that says what to do."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, get_session, get_token
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError
from rich.console import Console
from rich.markup import escape
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from builder import constants
from builder.errors import PublishAuthError, PublishError, PublishNetworkError, PublishPermissionError
from builder.publish.models import PublishPlan

REPO_TYPE = "model"
#: What a token (or any bearer credential) in server text is printed as.
REDACTED = "<redacted>"
_BEARER = re.compile(r"Bearer\s+[^\s\"',;)]+", re.IGNORECASE)
#: Files the Hub creates in every repo; never deleted as stale.
HUB_OWNED = frozenset({".gitattributes"})
LOGIN_HINT = f"run `hf auth login`, or set {constants.ENV_HF_TOKEN} to a token with write access"


def token_source() -> str | None:
    """Where huggingface_hub will find a token (its own lookup order), without reading it out."""
    if get_token() is None:
        return None
    return f"{constants.ENV_HF_TOKEN} environment variable" if os.environ.get(constants.ENV_HF_TOKEN) else "huggingface_hub login cache"


def require_token() -> str:
    token = get_token()
    if not token:
        raise PublishAuthError("no Hugging Face token found; nothing was uploaded", hint=LOGIN_HINT)
    return token


def is_transient(exc: BaseException) -> bool:
    """5xx, 429 and connection trouble may pass on a retry; other 4xx never will."""
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code
        return status == 429 or status >= 500
    if isinstance(exc, OfflineModeIsEnabled):
        return False
    return isinstance(exc, (httpx2.TransportError, ConnectionError, TimeoutError))


class Hub:
    """One HfApi client plus the retry policy; `call` runs one Hub operation and names it in errors."""

    def __init__(
        self,
        api: Any,
        *,
        repo: str,
        console: Console,
        sleep: Callable[[float], None],
        attempts: int,
        initial_s: float,
        max_s: float,
        secret: str | None = None,
    ) -> None:
        self._api = api
        self._repo = repo
        self._console = console
        self._secret = secret
        self._retrying = Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=initial_s, max=max_s),
            retry=retry_if_exception(is_transient),
            sleep=sleep,
            before_sleep=self._announce_retry,
            reraise=True,
        )
        self._attempts = attempts
        self._what = ""

    def call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        self._what = what
        self._console.print(f"[bold]hub:[/] {escape(what)}")
        try:
            return self._retrying(getattr(self._api, method), *args, **kwargs)
        except Exception as exc:
            leaks = self._secret is not None and self._secret in _exception_text(exc)
            translated = self._translate(exc)
            if translated is None and leaks:  # a traceback would print the echoed token
                translated = PublishError(f"unexpected {type(exc).__name__} while trying to {what}: {self.redact(str(exc))}")
            if translated is None:
                raise
            # The original error is kept for debugging unless it holds the token (an echoing endpoint).
            raise translated from (None if leaks else exc)

    def redact(self, text: str) -> str:
        """`text` without the token, e.g. when an endpoint echoes the Authorization header in an error body."""
        if self._secret:
            text = text.replace(self._secret, REDACTED)
        return _BEARER.sub(f"Bearer {REDACTED}", text)

    def _announce_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        self._console.print(
            f"[yellow]hub:[/] {escape(self._what)}: {_short(exc)}; retry {state.attempt_number + 1}/{self._attempts} in {wait:.1f}s",
            highlight=False,
        )

    def _translate(self, exc: BaseException) -> PublishError | None:
        what, repo = self._what, self._repo
        if isinstance(exc, HfHubHTTPError):
            status = exc.response.status_code
            detail = f" ({self.redact(exc.server_message)})" if exc.server_message else ""
            # The Hub answers 401 both for a bad token and for a repo the token cannot see; the
            # library tells them apart (RepositoryNotFoundError), so a "not found" is a permission problem.
            write_hint = "use a token with write access to that namespace (fine-grained: 'write' on the repo or org)"
            if isinstance(exc, RepositoryNotFoundError):
                return PublishPermissionError(
                    f"{repo} is not visible to this token ({status}) while trying to {what}: it is missing or private to others",
                    hint=write_hint,
                )
            if status == 403:
                return PublishPermissionError(f"the token may not write to {repo} (403) while trying to {what}{detail}", hint=write_hint)
            if status == 401:
                return PublishAuthError(f"the Hub rejected the token (401) while trying to {what}{detail}", hint=LOGIN_HINT)
            if status == 412:
                return PublishError(
                    f"the branch moved on {repo} while trying to {what}: someone pushed, or a retried attempt "
                    "of this commit had already landed; this attempt committed nothing",
                    hint=f"look at https://huggingface.co/{repo}/commits, then re-run to commit on top of the new head",
                )
            if is_transient(exc):
                return PublishNetworkError(
                    f"the Hub kept answering {status} while trying to {what}, after {self._attempts} attempts{detail}",
                    hint="try again later; https://status.huggingface.co shows Hub incidents",
                )
            return PublishError(f"the Hub refused to {what}: {status}{detail}", hint="fix the request the message names, then re-run")
        if isinstance(exc, OfflineModeIsEnabled):
            return PublishNetworkError(f"cannot {what}: huggingface_hub is in offline mode", hint=f"unset {constants.ENV_HF_HUB_OFFLINE}")
        if is_transient(exc):
            return PublishNetworkError(
                f"cannot reach the Hub to {what} after {self._attempts} attempts: {_short(exc)}",
                hint="check the network connection and proxy settings (HTTPS_PROXY), then re-run",
            )
        return None


def _exception_text(exc: BaseException) -> str:
    """Everything a traceback of `exc` could print that came from the server."""
    parts = [str(exc), repr(exc.args)]
    response = getattr(exc, "response", None)
    if response is not None:
        try:
            parts.append(response.text)
        except Exception:  # noqa: BLE001 - an unread streamed body has no text; nothing to print then
            pass
    return "\n".join(parts)


@contextmanager
def hub_timeouts(*, connect_s: float, read_s: float) -> Iterator[None]:
    """Every Hub request in this block times out: huggingface_hub's shared client has no timeout,
    so a Hub that accepts a connection and never answers would hold a call for ever. A timeout
    is a transport error, so it is retried like one and ends in PublishNetworkError."""
    session = get_session()
    previous = session.timeout
    session.timeout = httpx2.Timeout(read_s, connect=connect_s)
    try:
        yield
    finally:
        session.timeout = previous


def _short(exc: BaseException | None) -> str:
    if isinstance(exc, HfHubHTTPError):
        return f"HTTP {exc.response.status_code}"
    return type(exc).__name__ if exc is not None else "unknown error"


def upload(hub: Hub, *, plan: PublishPlan, source_dir: Path) -> Any:
    """create_repo -> check the tag is free -> branch -> one commit (adds + stale deletes) -> tag.

    The tag is checked before anything is written, so a re-publish of a version fails without
    touching the repo; the tag points at the commit made here, not at whatever the branch head is.
    """
    # private=None (not False) leaves a new repo at the namespace's default visibility.
    hub.call(f"create repo {plan.repo}", "create_repo", plan.repo, repo_type=REPO_TYPE, private=plan.private or None, exist_ok=True)
    refs = hub.call("list branches and tags", "list_repo_refs", plan.repo, repo_type=REPO_TYPE)
    if any(ref.name == plan.tag for ref in refs.tags):
        raise PublishError(
            f"tag {plan.tag!r} already exists on {plan.repo}; nothing was uploaded",
            hint="bump the bundle version, or pass --tag with a new tag",
        )
    heads = {ref.name: ref.target_commit for ref in refs.branches}
    if plan.revision not in heads:
        hub.call(f"create branch {plan.revision}", "create_branch", plan.repo, branch=plan.revision, repo_type=REPO_TYPE, exist_ok=True)
    # The commit must land on the head whose files were listed, or its deletions could be wrong:
    # the Hub refuses it (412) when the branch moved meanwhile. A new branch starts at main's head.
    parent = heads.get(plan.revision) or heads.get("main")
    remote = hub.call(f"list files on {plan.revision}", "list_repo_files", plan.repo, revision=plan.revision, repo_type=REPO_TYPE)
    wanted = {f.path for f in plan.files}
    stale = sorted(set(remote) - wanted - HUB_OWNED)
    operations: list[CommitOperationAdd | CommitOperationDelete] = [
        CommitOperationAdd(path_in_repo=f.path, path_or_fileobj=source_dir / f.path) for f in plan.files
    ]
    operations += [CommitOperationDelete(path_in_repo=path) for path in stale]
    info = hub.call(
        f"commit {len(plan.files)} files" + (f" and delete {len(stale)} stale" if stale else ""),
        "create_commit",
        plan.repo,
        operations,
        commit_message=plan.commit_message,
        commit_description=plan.commit_description,
        repo_type=REPO_TYPE,
        revision=plan.revision,
        parent_commit=parent,
    )
    hub.call(f"tag {plan.tag}", "create_tag", plan.repo, tag=plan.tag, tag_message=plan.commit_message, revision=info.oid, repo_type=REPO_TYPE)
    return info
