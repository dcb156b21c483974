"""Which top-level names a folder on sys.path would take from an installed distribution.

A module or regular package found earlier on sys.path wins over the installed one of the same
name, for every later import in the process (transformers importing `kernels` found an archived
benchmark file that way). Namespace folders (no __init__.py) never win over a regular package,
so they do not count."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.machinery
from pathlib import Path

#: The project's own distribution: its `builder` package is meant to be found.
OWN_DISTRIBUTION = "qfn-int8kv"


@functools.cache
def installed_import_names() -> dict[str, tuple[str, ...]]:
    """Top-level import name -> the installed distributions providing it (the project excluded)."""
    names = {}
    for name, dists in importlib.metadata.packages_distributions().items():
        others = tuple(sorted({d for d in dists if d.lower() != OWN_DISTRIBUTION}))
        if others and name.isidentifier():
            names[name] = others
    return names


def top_level_names(folder: Path) -> set[str]:
    """What `import NAME` finds in ``folder``: modules (source or extension) and regular packages."""
    found = set()
    if not folder.is_dir():
        return found
    for entry in folder.iterdir():
        if entry.is_dir() and (entry / "__init__.py").is_file():
            found.add(entry.name)
        elif entry.is_file():
            for suffix in (*importlib.machinery.SOURCE_SUFFIXES, *importlib.machinery.EXTENSION_SUFFIXES):
                if entry.name.endswith(suffix):
                    found.add(entry.name[: -len(suffix)])
    return found


def shadowed(folder: Path) -> dict[str, tuple[str, ...]]:
    """Name -> distributions that ``folder``, put on sys.path, would shadow."""
    installed = installed_import_names()
    return {n: installed[n] for n in sorted(top_level_names(folder)) if n in installed}


def describe(folder: Path, names: dict[str, tuple[str, ...]]) -> str:
    return "; ".join(f"{folder}/{n} shadows the installed {', '.join(d)}" for n, d in names.items())
