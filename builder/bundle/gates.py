"""Which gates a bundle passed, failed or lacks, judged from the bundle's own evidence. The card
says so at the top when it is built, and publish refuses the bundle without --allow-failed-gates."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from builder import constants
from builder.errors import MeasureError, UnverifiedBundle
from builder.measure.evidence import GateEvidence, load_gate_evidence


class GateStatus(BaseModel):
    """One gate as the release sees it."""

    gate: str
    verdict: str = Field(description="pass, fail, or missing (no evidence file).")
    required: bool = Field(description="Blocks publishing when not passed.")
    summary: str = ""


class GateReport(BaseModel):
    """Every gate's status; `ok` when no blocking gate is missing or failed."""

    gates: list[GateStatus]

    @property
    def blocking(self) -> list[GateStatus]:
        return [g for g in self.gates if g.required and g.verdict != "pass"]

    @property
    def ok(self) -> bool:
        return not self.blocking


def assess_gates(*, evidence_dir: Path) -> GateReport:
    """A gate blocks when it is listed for release or marked required, and has no passing evidence.

    Listing by name as well as trusting `required` means a failed release gate cannot slip
    through because its evidence file says required=false.
    """
    try:
        found = load_gate_evidence(evidence_dir) if evidence_dir.is_dir() else []
    except MeasureError as exc:
        raise UnverifiedBundle(f"gate evidence is unreadable: {exc.message}", hint="rebuild the bundle from good evidence") from exc
    return gate_report(found)


def gate_report(found: list[GateEvidence]) -> GateReport:
    """The report of gate evidence already read."""
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


def describe_blocking(report: GateReport) -> str:
    return ", ".join(f"{g.gate} ({g.verdict})" for g in report.blocking)
