"""`builder render`: the launch files and model card of one target, written to a folder atomically."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from builder.atomic import replace_dir
from builder.checksums import FolderCheck, manifest_text, replace_refusal
from builder.config import launch_plan, load_target
from builder.constants import (
    CARD_NAME,
    CHECKSUMS_NAME,
    EVIDENCE_DIR,
    KERNEL_EVIDENCE,
    LAUNCH_SCRIPT_NAME,
    SOURCE_TREES,
)
from builder.errors import RenderError
from builder.bundle.card import card_context, plan_for_card, render_card
from builder.launch.environment import make_environment
from builder.launch.render import render_launch

#: Top-level names `render` writes, besides its CHECKSUMS.sha256.
RENDER_TOP_LEVEL = {"launch", CARD_NAME}


def write_text_files(root: Path, files: dict[str, str]) -> None:
    """Write {relative path: text}; the launch script is executable."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel == LAUNCH_SCRIPT_NAME:
            path.chmod(0o755)


def render_to(*, target: str, out: Path, evidence_root: Path = EVIDENCE_DIR, console: Console | None = None) -> list[Path]:
    """Render launch/ and README.md for `target` into `out`; returns the written paths."""
    console = console or Console(stderr=True)
    cfg = load_target(target)
    plan = launch_plan(cfg)
    env = make_environment()
    files = render_launch(cfg=cfg, plan=plan, env=env)
    capacity, capacity_error = plan_for_card(cfg)
    ctx = card_context(
        cfg=cfg, plan=plan, evidence_dir=evidence_root / cfg.target.name, files=[*files, CARD_NAME, CHECKSUMS_NAME],
        capacity=capacity, capacity_error=capacity_error,
        kernels_dir=evidence_root / KERNEL_EVIDENCE if cfg.patches.apply else None,
    )
    files[CARD_NAME] = render_card(ctx, env=env)
    with replace_dir(
        out,
        replaceable=render_refusal,
        what="render output",
        error=RenderError,
        refuse_inside=SOURCE_TREES,
        notify=lambda line: console.print(f"render: {line}", markup=False, highlight=False, soft_wrap=True),
    ) as stage:
        write_text_files(stage, files)
        # The manifest is what proves a later render may replace this folder.
        (stage / CHECKSUMS_NAME).write_text(manifest_text(stage, list(files)))
    return [Path(out) / rel for rel in [*files, CHECKSUMS_NAME]]


def render_refusal(root: Path) -> str | None:
    """Why `root` may not be replaced by a new render (None: an intact earlier render output)."""
    return replace_refusal(root, accept=_only_render_files)


def _only_render_files(check: FolderCheck) -> str | None:
    if not all(p.split("/", 1)[0] in RENDER_TOP_LEVEL for p in check.listed):
        return f"is not a render output: its {CHECKSUMS_NAME} lists files `render` does not write (a bundle's?)"
    return None
