"""Whether publish goes on when gates did not pass (the bundle stage judges them)."""

from __future__ import annotations

from builder.bundle.gates import GateReport, describe_blocking
from builder.errors import GatesNotPassed


def refuse_unless_passed(report: GateReport, *, allow_failed: bool) -> None:
    if report.ok or allow_failed:
        return
    raise GatesNotPassed(
        "required gates did not pass: " + describe_blocking(report),
        hint="re-run `builder gates` and rebuild the bundle, or pass --allow-failed-gates to publish with a warning card",
    )
