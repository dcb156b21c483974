"""Rules for target.addon_locks: hash locks layered over the engine lock."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from builder.config.models import Target


def check_addon_locks(target: Target) -> None:
    """Refuses an add-on lock that is not a pinned lock of the target's platform inside the repository."""
