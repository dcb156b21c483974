"""Talking to the Hub: the token from its standard places, retries on transient errors only, and
each Hub failure turned into an error that says what to do."""

from __future__ import annotations

import os
import threading
import time
import weakref
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
from builder.redact import redact

REPO_TYPE = "model"
#: Files the Hub creates in every repo; never deleted as stale.
HUB_OWNED = frozenset({constants.HUB_ATTRIBUTES_NAME})
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


class Deadline:
    """`publish --timeout`: one budget for the whole Hub part, started when publish turns to the Hub."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._end = clock() + seconds

    def left(self) -> float:
        return self._end - self._clock()


class BudgetSpent(Exception):
    """The --timeout ran out before a Hub call finished; never retried."""


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
        deadline: Deadline | None = None,
    ) -> None:
        self._api = api
        self._repo = repo
        self._console = console
        self._secret = secret
        self._deadline = deadline
        backoff = wait_exponential(multiplier=initial_s, max=max_s)
        self._retrying = Retrying(
            # A retry never starts once the budget is spent, and a backoff wait never outlasts it.
            stop=stop_after_attempt(attempts) | (lambda state: self._left() <= 0),
            wait=lambda state: max(0.0, min(backoff(state), self._left())),
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
            return self._retrying(self._within_budget, getattr(self._api, method), *args, **kwargs)
        except Exception as exc:
            leaks = self._secret is not None and self._secret in _exception_text(exc)
            translated = self._translate(exc)
            if translated is None and leaks:  # a traceback would print the echoed token
                translated = PublishError(f"unexpected {type(exc).__name__} while trying to {what}: {self.redact(str(exc))}")
            if translated is None:
                raise
            # The original error is kept for debugging unless it holds the token (an echoing endpoint).
            raise translated from (None if leaks else exc)

    def _left(self) -> float:
        return self._deadline.left() if self._deadline is not None else float("inf")

    def _within_budget(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One attempt, abandoned when the budget runs out.

        Each request already times out within the budget (`hub_timeouts`), but a Hub trickling an
        answer a byte at a time, or huggingface_hub's own retry sleeps, could outlast it: the
        attempt runs in a daemon thread that is left at the deadline. That thread can send no
        further request (the request hook refuses it), so nothing lands after publish has failed
        but a request already in flight.
        """
        if self._deadline is None:
            return fn(*args, **kwargs)
        left = self._deadline.left()
        if left <= 0:
            raise BudgetSpent("no time left")
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, fn(*args, **kwargs)))
            except BaseException as exc:  # handed to the calling thread, which raises it
                outcome.append((False, exc))

        worker = threading.Thread(target=run, name="builder-publish-hub", daemon=True)
        _WORKER_DEADLINES[worker] = self._deadline
        worker.start()
        worker.join(left)
        if not outcome:
            raise BudgetSpent("no complete answer before the deadline")
        ok, value = outcome[0]
        if ok:
            return value
        raise value

    def redact(self, text: str) -> str:
        """`text` with the Hub token, the API key and any bearer credential redacted (builder.redact's rule)."""
        return redact(text, self._secret)

    def _announce_retry(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        self._console.print(
            f"[yellow]hub:[/] {escape(self._what)}: {_short(exc)}; retry {state.attempt_number + 1}/{self._attempts} in {wait:.1f}s",
            highlight=False,
        )

    def _translate(self, exc: BaseException) -> PublishError | None:
        what, repo = self._what, self._repo
        spent = isinstance(exc, BudgetSpent) or (is_transient(exc) and self._left() <= 0)
        if spent and self._deadline is not None:
            return PublishNetworkError(
                f"publish ran out of its --timeout of {self._deadline.seconds:g} s while trying to {what}"
                + ("" if isinstance(exc, BudgetSpent) else f" ({_short(exc)})"),
                hint="re-run with a larger --timeout (e.g. --timeout 1800) if the Hub or the network is slow; "
                "check the network and proxy settings (HTTPS_PROXY) and https://status.huggingface.co. A commit "
                f"or tag cut off by the timeout may still have landed: look at https://huggingface.co/{repo}/commits first",
            )
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


#: The budget of each attempt's worker thread, read by the request hook; other threads are left alone.
_WORKER_DEADLINES: weakref.WeakKeyDictionary[threading.Thread, Deadline] = weakref.WeakKeyDictionary()


@contextmanager
def hub_timeouts(*, connect_s: float, read_s: float) -> Iterator[None]:
    """Every Hub request made by a `Hub` attempt in this block times out: huggingface_hub's shared
    client has no timeout, so a Hub that accepts a connection and never answers would hold a call
    for ever. A timeout is a transport error, so it is retried like one and ends in
    PublishNetworkError. No request waits longer than the --timeout budget has left, and none
    starts once it is spent (huggingface_hub retries some requests itself)."""

    active = True

    def cap(request: httpx2.Request) -> None:
        deadline = _WORKER_DEADLINES.get(threading.current_thread())
        if deadline is None and not active:  # the block is over: only a left-behind worker is held to it
            return
        left = deadline.left() if deadline is not None else float("inf")
        if left <= 0:
            raise BudgetSpent("no time left for another request")
        limits = {"connect": min(connect_s, left), "read": min(read_s, left), "write": min(read_s, left), "pool": min(read_s, left)}
        given = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {k: v if given.get(k) is None else min(given[k], v) for k, v in limits.items()}

    session = get_session()
    previous = session.event_hooks
    session.event_hooks = {**previous, "request": [*previous.get("request", []), cap]}
    try:
        yield
    finally:
        active = False
        # A worker left running at the deadline keeps the hook, so it can start no further request.
        if not any(t.is_alive() for t in list(_WORKER_DEADLINES)):
            session.event_hooks = previous


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
