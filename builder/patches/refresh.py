"""Regenerate the series' diffs from an edited engine tree.

Each patch is re-diffed, file by file, between the pristine upstream sources
with the earlier patches applied and the edited tree; its header gets the
upstream sha256 of every file. A file belongs to exactly one patch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from pydantic import BaseModel

from builder.constants import PATCHES_DIR
from builder.errors import PatchError
from builder.hashing import sha256_file
from builder.patches.apply import run_patch
from builder.patches.engine import fetch_engine
from builder.patches.series import NEW_FILE, load_series, render_patch


class RefreshReport(BaseModel):
    written: list[Path]
    unchanged: list[Path]


def diff_file(*, path: str, old: Path | None, new: Path) -> str:
    """``diff -u`` of one file with a/ b/ labels; ``old=None`` makes a new-file section."""
    if not new.is_file():
        raise PatchError(f"edited tree lacks {path}", hint="refresh from the tree you edited, or drop the file from the patch header")
    old_arg = str(old) if old is not None else os.devnull
    old_label = f"a/{path}" if old is not None else "/dev/null"
    result = subprocess.run(
        ["diff", "-u", "--label", old_label, "--label", f"b/{path}", old_arg, str(new)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0:
        raise PatchError(f"{path} no longer differs from upstream", hint="remove it from the patch header")
    if result.returncode != 1:
        raise PatchError(f"diff failed on {path}: {result.stderr.strip()}")
    return result.stdout


def _parse_add(add: list[str]) -> dict[str, list[str]]:
    by_patch: dict[str, list[str]] = {}
    for item in add:
        name, sep, path = item.partition(":")
        if not sep or not name or not path:
            raise PatchError(f"--add {item!r} is not PATCH:PATH", hint="e.g. --add qsa-int8:vllm/models/qwen4_exp/nvidia/ops/new.py")
        by_patch.setdefault(name, []).append(path)
    return by_patch


def refresh_series(*, edited: Path, pristine: Path | None = None, patches_dir: Path = PATCHES_DIR, add: list[str] = ()) -> RefreshReport:
    """Rewrite every diff of the series from ``edited``; ``add`` holds PATCH:PATH files to add.

    ``pristine`` defaults to the cached, verified 0.33.0 sources (fetched if absent).
    """
    if pristine is None:
        pristine = fetch_engine().src_dir
    patches = load_series(patches_dir)
    adds = _parse_add(list(add))
    unknown = set(adds) - {p.name for p in patches}
    if unknown:
        raise PatchError(f"--add names unknown patches {sorted(unknown)}", hint="use the name in a diff's '# qfn-int8kv patch:' line")
    claimed: dict[str, str] = {}
    written, unchanged = [], []
    with tempfile.TemporaryDirectory(prefix="qfn-refresh-") as tmp:
        base = Path(tmp)
        for patch in patches:
            paths = [f.path for f in patch.files] + [p for p in adds.get(patch.name, []) if p not in {f.path for f in patch.files}]
            files = []
            for path in paths:
                if path in claimed:
                    raise PatchError(f"{path} is in both {claimed[path]} and {patch.name}", hint="keep each file in one patch")
                claimed[path] = patch.name
                upstream = pristine / path
                current = base / path
                if not current.exists() and upstream.is_file():
                    current.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(upstream, current)
                sha = sha256_file(upstream) if upstream.is_file() else NEW_FILE
                section = diff_file(path=path, old=current if current.is_file() else None, new=edited / path)
                files.append((path, sha, section))
            text = render_patch(name=patch.name, engine_version=patch.engine_version, description=patch.description, files=files)
            if text == patch.source.read_text():
                unchanged.append(patch.source)
            else:
                tmp_out = patch.source.with_suffix(patch.source.suffix + ".tmp")
                tmp_out.write_text(text)
                tmp_out.replace(patch.source)
                written.append(patch.source)
            for path, _, section in files:  # later patches diff against this one's result
                result = run_patch(base, section, "--forward")
                if result.returncode != 0:
                    raise PatchError(f"{patch.name}: regenerated section for {path} does not apply", hint="report this: refresh produced an inconsistent diff")
    return RefreshReport(written=written, unchanged=unchanged)
