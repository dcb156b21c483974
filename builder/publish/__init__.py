"""Publish a verified bundle to the Hugging Face Hub: verify, check gates, plan, then (with --yes) upload."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi
from rich.console import Console
from rich.markup import escape

from builder import constants
from builder.bundle.assemble import BUNDLE_EVIDENCE
from builder.bundle.gates import assess_gates
from builder.publish.card import load_card
from builder.publish.gates import refuse_unless_passed
from builder.publish.hub import Deadline, Hub, hub_timeouts, require_token, token_source, upload
from builder.publish.models import PublishPlan, PublishRequest
from builder.publish.plan import make_plan, show_plan
from builder.publish.signature import assess_signing
from builder.publish.stage import upload_source, verified

__all__ = ["PublishPlan", "PublishRequest", "publish"]


def publish(
    *,
    request: PublishRequest,
    console: Console | None = None,
    api_factory: Callable[..., Any] = HfApi,
    sleep: Callable[[float], None] = time.sleep,
) -> PublishPlan:
    """Refuse an unverified bundle, failed gates or a bundle not signed by --public-key's pair before
    any Hub call; print the plan; upload with `yes`,
    within `request.timeout_s` for the whole Hub part.

    `api_factory(token=...)` builds the Hub client (tests pass a recording fake); `sleep` is the
    retry backoff's clock.
    """
    console = console or Console()
    bundle_dir: Path = request.bundle_dir
    release = verified(bundle_dir)
    report = assess_gates(evidence_dir=bundle_dir / BUNDLE_EVIDENCE)
    refuse_unless_passed(report, allow_failed=request.allow_failed_gates)
    card = load_card(bundle_dir / constants.CARD_NAME)
    signing = assess_signing(request, report=report, card=card)
    with upload_source(bundle_dir, card=card, report=report, signing=signing) as source_dir:
        plan = make_plan(request=request, release=release, source_dir=source_dir, report=report, token_source=token_source(),
                         signing=signing, card=card)
        show_plan(plan, console=console)
        if not request.yes:
            console.print("[bold]dry run:[/] nothing was uploaded; re-run with --yes to publish this plan")
            return plan
        token = require_token()
        hub = Hub(
            api_factory(token=token),
            deadline=Deadline(request.timeout_s),
            repo=plan.repo,
            console=console,
            sleep=sleep,
            attempts=constants.PUBLISH_RETRY_ATTEMPTS,
            initial_s=constants.PUBLISH_RETRY_INITIAL_S,
            max_s=constants.PUBLISH_RETRY_MAX_S,
            secret=token,
        )
        with hub_timeouts(connect_s=constants.PUBLISH_CONNECT_TIMEOUT_S, read_s=constants.PUBLISH_READ_TIMEOUT_S):
            info = upload(hub, plan=plan, source_dir=source_dir)
    console.print(f"[bold green]published:[/] {escape(hub.redact(str(info.commit_url)))} (tag {escape(plan.tag)})", highlight=False)
    return plan
