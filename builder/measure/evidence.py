"""The evidence contract: what gates and benchmarks write, and what bundle and publish read."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from builder.errors import MeasureError


class GateEvidence(BaseModel):
    """One gate's verdict with everything needed to re-check it: evidence/<target>/<gate>.json."""

    model_config = ConfigDict(extra="allow")

    gate: str = Field(description="Gate name, e.g. golden_probes, needle, kv_pool.")
    required: bool = Field(description="A failed required gate blocks publishing.")
    verdict: Literal["pass", "fail"]
    summary: str = Field(default="", description="One line for the model card, e.g. '3/3' or 'HIT (7,900 tokens)'.")
    thresholds: dict[str, Any] = Field(default_factory=dict)
    records: list[dict[str, Any]] = Field(default_factory=list, description="Raw requests and responses.")
    server_version: str | None = None
    config_digest: str | None = None
    created: datetime


GATE_PREFIX_EXCLUDE = ("bench",)


def load_gate_evidence(directory: Path) -> list[GateEvidence]:
    """Every gate file in a target's evidence dir (benchmark files are not gates), sorted by gate."""
    out = []
    for path in sorted(directory.glob("*.json")):
        if path.name.startswith(GATE_PREFIX_EXCLUDE):
            continue
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise MeasureError(f"{path}: not valid JSON: {exc}", hint="re-run `builder gates` to rewrite it") from exc
        if not isinstance(data, dict) or "gate" not in data:
            continue
        try:
            out.append(GateEvidence.model_validate(data))
        except ValidationError as exc:
            raise MeasureError(f"{path}: not a gate evidence file: {exc}", hint="re-run `builder gates`") from exc
    return sorted(out, key=lambda g: g.gate)
