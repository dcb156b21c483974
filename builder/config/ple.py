"""Whether a target's engine memory-maps the PLE table, and where it keeps table files.

One decision read by the launch plan (the --engram-config key and the required input) and by the
container plan (the read-write table-file mount), so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Collection

from builder.config.models import ReleaseConfig
from builder.constants import PATCHES_DIR

PLE_TABLE_DIR_ENV = "VLLM_PLE_MMAP_TABLE_DIR"
"""Where the engine keeps PLE table files when it memory-maps the table (the ple-mmap patch reads it)."""


def series_patch_names() -> set[str]:
    """Names of the patches bundle/patches/series carries."""
    from builder.patches.series import load_series

    return {p.name for p in load_series(PATCHES_DIR)}


def engine_maps_ple(cfg: ReleaseConfig, *, series: Collection[str] | None = None) -> bool:
    """Whether the served engine can memory-map the PLE table: by itself, or through a patch
    of the series that the target applies. ``series`` (patch names) defaults to bundle/patches/series."""
    engine = cfg.engine.resolved
    if engine.ple_mmap:
        return True
    if engine.ple_mmap_patch is None or not cfg.patches.apply:
        return False
    return engine.ple_mmap_patch in (series_patch_names() if series is None else series)


def maps_ple_table(cfg: ReleaseConfig, *, series: Collection[str] | None = None) -> bool:
    """The launch turns mmap on: the model has a PLE table, the config asks for mmap, the engine can."""
    return cfg.ple.present and cfg.ple.mmap_table and engine_maps_ple(cfg, series=series)
