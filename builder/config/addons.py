"""Rules for target.addon_locks: hash locks layered over the engine lock."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from builder.config._base import rule_error
from builder.config.guards import check_repo_path

if TYPE_CHECKING:
    from builder.config.models import Target

#: Where add-on locks live (`builder base lock --addon` writes them there, beside the engine locks).
ADDON_LOCK_DIR = "docker/locks/"
_ENTRY = re.compile(r"^(?P<path>[^@]*)(?:@(?P<digest>.*))?\Z")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*-linux-(?P<arch>arm64|amd64)\.txt\Z")


def check_addon_locks(target: Target) -> None:
    """Refuses an add-on lock that is not a pinned lock of the target's platform inside the repository."""
    seen: set[str] = set()
    for i, entry in enumerate(target.addon_locks):
        field = f"target.addon_locks[{i}]"
        example = f"{ADDON_LOCK_DIR}ray-2.60.0-linux-{target.arch}.txt@sha256:<digest>"
        if target.base_source != "wheel-lock":
            raise rule_error(
                field,
                f"'{entry}' is installed over the engine lock, and target '{target.name}' has base_source = "
                f"'{target.base_source}', whose base carries no lock to install it over",
                'set base_source = "wheel-lock" (with base_lock), or remove target.addon_locks',
            )
        m = _ENTRY.match(entry)
        path, digest = (m["path"], m["digest"]) if m else (entry, None)
        check_repo_path(path, field=field, example=example)
        name = path.removeprefix(ADDON_LOCK_DIR)
        if not path.startswith(ADDON_LOCK_DIR) or "/" in name:
            raise rule_error(
                field,
                f"'{path}' is not a lock in {ADDON_LOCK_DIR}, where `builder base lock --addon` writes add-on locks",
                f"resolve the add-on there (`builder base lock --platform {target.platform} --addon NAME==VERSION`) "
                f"and name it as {example}",
            )
        found = _NAME.match(name)
        if found is None or found["arch"] != target.arch:
            raise rule_error(
                field,
                f"'{path}' is not a lock of {target.platform} (its name must end -linux-{target.arch}.txt), so its "
                "wheels would not install on the target",
                f"use the add-on lock of {target.platform}: {example}",
            )
        if path == target.base_lock_path:
            raise rule_error(field, f"'{path}' is the engine lock itself (target.base_lock)",
                             "name an add-on lock, resolved with `builder base lock --addon`")  # fmt: skip
        if path in seen:
            raise rule_error(field, f"'{path}' is named twice", "name each add-on lock once")
        seen.add(path)
        if digest is None or not _DIGEST.match(digest):
            problem = "has no @sha256: digest" if digest is None else f"has a malformed digest '@{digest}'"
            raise rule_error(
                field,
                f"'{entry}' {problem}, so any edit of the add-on lock would be built",
                f"run `builder pin --target {target.name}`: it writes each add-on lock's file digest, "
                "path@sha256:<sha256sum of the file>",
            )
