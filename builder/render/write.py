"""`builder render`: the launch files and model card of one target, written to a folder atomically."""

from __future__ import annotations

from pathlib import Path

from builder.atomic import replace_dir
from builder.config import launch_plan, load_target
from builder.constants import CARD_NAME, EVIDENCE_DIR, KERNEL_EVIDENCE, LAUNCH_SCRIPT_NAME
from builder.errors import RenderError
from builder.render.card import card_context, plan_for_card, render_card
from builder.render.environment import make_environment
from builder.render.launch import render_launch

#: Top-level names `render` writes; a folder holding only these is an earlier render and may be replaced.
RENDER_TOP_LEVEL = {"launch", CARD_NAME}


def write_text_files(root: Path, files: dict[str, str]) -> None:
    """Write {relative path: text}; the launch script is executable."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if rel == LAUNCH_SCRIPT_NAME:
            path.chmod(0o755)


def render_to(*, target: str, out: Path, evidence_root: Path = EVIDENCE_DIR) -> list[Path]:
    """Render launch/ and README.md for `target` into `out`; returns the written paths."""
    cfg = load_target(target)
    plan = launch_plan(cfg)
    env = make_environment()
    files = render_launch(cfg=cfg, plan=plan, env=env)
    capacity, capacity_error = plan_for_card(cfg)
    ctx = card_context(
        cfg=cfg, plan=plan, evidence_dir=evidence_root / cfg.target.name, files=[*files, CARD_NAME],
        capacity=capacity, capacity_error=capacity_error,
        kernels_dir=evidence_root / KERNEL_EVIDENCE if cfg.patches.apply else None,
    )
    files[CARD_NAME] = render_card(ctx, env=env)
    with replace_dir(
        out,
        replaceable=lambda d: {p.name for p in d.iterdir()} <= RENDER_TOP_LEVEL,
        what="render output",
        error=RenderError,
    ) as stage:
        write_text_files(stage, files)
    return [Path(out) / rel for rel in files]
