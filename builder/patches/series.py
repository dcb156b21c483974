"""The patch series: the ``series`` file, each patch's header, and its per-file sections.

A patch is a unified diff (``a/`` and ``b/`` prefixes, applied with -p1) with a
comment header that GNU patch skips::

    # qfn-int8kv patch: qsa-int8
    # engine: vllm==0.33.0
    # file: vllm/models/qwen4_exp/nvidia/ops/qsa.py sha256=<upstream hex>
    # file: vllm/models/qwen4_exp/nvidia/ops/qsa_kv_layout.py sha256=new
    # | free text: what the patch changes, one line per '# |'
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, Field

from builder.constants import PATCH_SERIES_NAME
from builder.errors import PatchError

NEW_FILE = "new"
_FILE_LINE = re.compile(r"^# file: (?P<path>\S+) sha256=(?P<sha>[0-9a-f]{64}|new)$")
_ENGINE_LINE = re.compile(r"^# engine: vllm==(?P<version>\S+)$")
_NAME_LINE = re.compile(r"^# qfn-int8kv patch: (?P<name>\S+)$")


class PatchedFile(BaseModel):
    """One engine file a patch touches, with the upstream sha256 it was made against."""

    path: str
    upstream_sha256: str = Field(pattern=r"^([0-9a-f]{64}|new)$")
    section: str  # the unified-diff text for this file alone


class Patch(BaseModel):
    """One diff of the series."""

    name: str
    source: Path
    engine_version: str
    description: list[str]
    files: list[PatchedFile]


def _split_sections(body: str, source: Path) -> dict[str, str]:
    """Per-file sections of a unified diff, keyed by the ``b/`` path."""
    sections: dict[str, str] = {}
    lines = body.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")]
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        target = lines[start + 1][4:].split("\t")[0].strip()
        if not target.startswith("b/"):
            raise PatchError(f"{source.name}: '+++ {target}' lacks the b/ prefix", hint="make diffs with `builder patches refresh` (-p1 layout)")
        sections[target[2:]] = "".join(lines[start:end])
    return sections


def parse_patch(source: Path) -> Patch:
    """Read one diff and its header; every header file must have a diff section and vice versa."""
    text = source.read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    name = version = None
    files: dict[str, str] = {}
    description: list[str] = []
    for line in header:
        if m := _NAME_LINE.match(line):
            name = m["name"]
        elif m := _ENGINE_LINE.match(line):
            version = m["version"]
        elif m := _FILE_LINE.match(line):
            files[m["path"]] = m["sha"]
        elif line.startswith("# |"):
            description.append(line[3:].strip())
    if name is None or version is None:
        raise PatchError(
            f"{source.name}: header lacks '# qfn-int8kv patch: NAME' or '# engine: vllm==VERSION'",
            hint="regenerate it with `builder patches refresh`",
        )
    body_start = text.find("\n--- ")
    sections = _split_sections(text[body_start + 1 :] if body_start >= 0 else "", source)
    if set(sections) != set(files):
        raise PatchError(
            f"{source.name}: header files {sorted(files)} differ from the diff's files {sorted(sections)}",
            hint="list each touched file as '# file: PATH sha256=HEX|new' or run `builder patches refresh`",
        )
    return Patch(
        name=name,
        source=source,
        engine_version=version,
        description=description,
        files=[PatchedFile(path=p, upstream_sha256=files[p], section=sections[p]) for p in files],
    )


def load_series(patches_dir: Path) -> list[Patch]:
    """The series in order; blank lines and '#' comments in ``series`` are skipped."""
    series = patches_dir / PATCH_SERIES_NAME
    if not series.is_file():
        raise PatchError(f"no series file at {series}", hint="list the diffs to apply, one per line, in bundle/patches/series")
    names = [line.strip() for line in series.read_text().splitlines() if line.strip() and not line.startswith("#")]
    patches = []
    for name in names:
        path = patches_dir / name
        if not path.is_file():
            raise PatchError(f"series names {name}, which is not in {patches_dir}", hint="fix bundle/patches/series")
        patches.append(parse_patch(path))
    return patches


def render_patch(*, name: str, engine_version: str, description: list[str], files: list[tuple[str, str, str]]) -> str:
    """Header plus sections; ``files`` holds (path, upstream sha256 or 'new', section)."""
    out = [f"# qfn-int8kv patch: {name}", f"# engine: vllm=={engine_version}"]
    out += [f"# file: {path} sha256={sha}" for path, sha, _ in files]
    out += [f"# | {line}".rstrip() for line in description]
    return "\n".join(out) + "\n" + "".join(section for _, _, section in files)
