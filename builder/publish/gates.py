"""Which gates a bundle passed, failed or lacks, judged from the bundle's own evidence/."""

from __future__ import annotations

from pathlib import Path

from builder import constants
from builder.errors import GatesNotPassed, MeasureError, UnverifiedBundle
from builder.measure.evidence import load_gate_evidence
from builder.publish.models import GateReport, GateStatus


def assess_gates(*, evidence_dir: Path) -> GateReport:
    """A gate blocks when it is listed for release or marked required, and has no passing evidence.

    Listing by name as well as trusting `required` means a failed release gate cannot slip
    through because its evidence file says required=false.
    """
    try:
        found = load_gate_evidence(evidence_dir) if evidence_dir.is_dir() else []
    except MeasureError as exc:
        raise UnverifiedBundle(f"gate evidence is unreadable: {exc.message}", hint="rebuild the bundle from good evidence") from exc
    statuses: dict[str, GateStatus] = {}
    for ev in found:
        previous = statuses.get(ev.gate)
        # Two files for one gate: any fail wins, so a stale pass cannot hide a newer fail.
        verdict = "fail" if ev.verdict == "fail" or (previous and previous.verdict == "fail") else "pass"
        statuses[ev.gate] = GateStatus(
            gate=ev.gate,
            verdict=verdict,
            required=ev.required or ev.gate in constants.PUBLISH_REQUIRED_GATES or bool(previous and previous.required),
            summary=ev.summary,
        )
    for name in constants.PUBLISH_REQUIRED_GATES:
        statuses.setdefault(name, GateStatus(gate=name, verdict="missing", required=True, summary="no evidence"))
    return GateReport(gates=sorted(statuses.values(), key=_order))


def _order(status: GateStatus) -> tuple[int, str]:
    names = constants.PUBLISH_REQUIRED_GATES
    return (names.index(status.gate) if status.gate in names else len(names), status.gate)


def refuse_unless_passed(report: GateReport, *, allow_failed: bool) -> None:
    if report.ok or allow_failed:
        return
    raise GatesNotPassed(
        "required gates did not pass: " + describe_blocking(report),
        hint="re-run `builder gates` and rebuild the bundle, or pass --allow-failed-gates to publish with a warning card",
    )


def describe_blocking(report: GateReport) -> str:
    return ", ".join(f"{g.gate} ({g.verdict})" for g in report.blocking)
