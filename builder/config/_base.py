"""Shared base for config models: unknown keys are errors, every field documented."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A typo must never be silently ignored, and a loaded config never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=False)


def rule_error(field: str, problem: str, fix: str) -> ValueError:
    """A cross-field rule failure; the message names the field and the fix."""
    return ValueError(f"{field}: {problem}. Fix: {fix}")
