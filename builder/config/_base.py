"""Shared base for config models: unknown keys are errors, every field documented."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A typo must never be silently ignored, and a loaded config never changes.

    Strict: "8000" is not a port and "yes" is not a bool (TOML has real ints and booleans), and
    inf/nan are not sizes.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=False, strict=True, allow_inf_nan=False)


def rule_error(field: str, problem: str, fix: str) -> ValueError:
    """A cross-field rule failure; the message names the field and the fix."""
    return ValueError(f"{field}: {problem}. Fix: {fix}")
