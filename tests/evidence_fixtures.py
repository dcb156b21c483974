"""A ledger for a synthetic evidence folder, written the way builder.evidence writes one."""

from __future__ import annotations

import datetime
from pathlib import Path

from builder.evidence import Claim, Ledger, ledger_toml

_DEFAULTS = {"subject": "test", "command": "builder gates", "commit": "55d2dec", "date": datetime.date(2026, 12, 1),
             "hardware": "test host", "software": "vLLM 0.33.0"}


def write_ledger(root: Path, *claims: dict) -> None:
    """root/claims.toml holding ``claims`` (each a dict of Claim fields; the rest defaulted)."""
    ledger = Ledger(history="git log --diff-filter=D -- evidence/",
                    claims=[Claim.model_validate({"statement": c["id"], **_DEFAULTS, **c}) for c in claims])
    (root / "claims.toml").write_text(ledger_toml(ledger))
