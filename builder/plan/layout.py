"""The int8 page layout, taken from the patch series itself.

The series adds ``ops/qsa_kv_layout.py`` to the engine; its ``int8_page_size_bytes`` and
``int8_scale_bytes_per_block`` are what the patched QSA backend's ``customize_spec`` uses to
size a page (K/V rows plus the fp32 side-scale tail). The planner runs that very code,
extracted from the diff that creates the file, so its page bytes cannot drift from the engine's.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from builder.constants import ENGINE_QSA_DIR, PATCHES_DIR
from builder.errors import PatchError
from builder.patches.series import NEW_FILE, load_series

LAYOUT_RELPATH = (ENGINE_QSA_DIR / "ops" / "qsa_kv_layout.py").as_posix()
_HUNK = re.compile(r"^@@ -0,0 \+1(?:,(?P<count>\d+))? @@")


def new_file_text(section: str, *, path: str) -> str:
    """The content of a file that a diff section creates (``--- /dev/null``, one ``@@ -0,0`` hunk)."""
    lines = section.splitlines(keepends=True)
    hunks = [i for i, line in enumerate(lines) if line.startswith("@@")]
    if len(hunks) != 1 or not (m := _HUNK.match(lines[hunks[0]])):
        raise PatchError(f"the series' section for {path} is not one new-file hunk", hint="regenerate it with `builder patches refresh`")
    body = lines[hunks[0] + 1 :]
    if any(not line.startswith("+") for line in body if line.strip("\n")):
        raise PatchError(f"the series' section for {path} has non-added lines", hint="regenerate it with `builder patches refresh`")
    count = int(m["count"] or 1)
    if len(body) != count:
        raise PatchError(f"the series' hunk for {path} says {count} lines but has {len(body)}", hint="regenerate it with `builder patches refresh`")
    return "".join(line[1:] for line in body)


def layout_source(patches_dir: Path = PATCHES_DIR) -> str:
    """The text of qsa_kv_layout.py as the series creates it (exactly one patch may touch it)."""
    touching = [(p, f) for p in load_series(patches_dir) for f in p.files if f.path == LAYOUT_RELPATH]
    if len(touching) != 1 or touching[0][1].upstream_sha256 != NEW_FILE:
        raise PatchError(
            f"expected exactly one patch in {patches_dir} to create {LAYOUT_RELPATH}, found {len(touching)}",
            hint="the planner reads the int8 page layout from the patch that adds it",
        )
    return new_file_text(touching[0][1].section, path=LAYOUT_RELPATH)


@lru_cache(maxsize=4)
def load_layout(patches_dir: Path = PATCHES_DIR) -> ModuleType:
    """qsa_kv_layout.py from the series as a module (it imports no torch at top level)."""
    module = ModuleType("qsa_kv_layout_from_series")
    code = compile(layout_source(patches_dir), f"{patches_dir}/<series>/{LAYOUT_RELPATH}", "exec")
    exec(code, module.__dict__)  # noqa: S102 - the project's own patch code: the point of this module
    for fn in ("int8_page_size_bytes", "int8_scale_bytes_per_block"):
        if not callable(getattr(module, fn, None)):
            raise PatchError(f"{LAYOUT_RELPATH} in the series has no {fn}()", hint="the planner sizes int8 pages with it")
    return module
