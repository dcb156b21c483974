"""`builder bundle`: render, copy and checksum one target's release folder, atomically."""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from builder.atomic import replace_dir
from builder.checksums import list_files, manifest_text, tree_digest
from builder.bundle.attestations import present_files, read_image_record
from builder.bundle.card import card_context, plan_for_card, render_card
from builder.bundle.manifest import BundleManifest, make_manifest
from builder.bundle.render import write_text_files
from builder.bundle.verify import bundle_refusal
from builder.config import launch_plan, load_target
from builder.constants import (
    ATTESTATIONS_DIR,
    BENCHMARK_NAME,
    BENCHMARK_SCRIPT,
    BUNDLE_MANIFEST_NAME,
    CARD_NAME,
    CHECKSUMS_NAME,
    CLAIMS_FILE,
    EVIDENCE_DIR,
    KERNEL_EVIDENCE,
    PATCHES_DIR,
    SOURCE_TREES,
)
from builder.errors import BundleError
from builder.evidence import FOLDER_README, ledger_toml, load_ledger
from builder.launch import make_environment, render_launch

BUNDLE_PATCHES = "patches"
BUNDLE_EVIDENCE = "evidence"


class BundleSources(BaseModel):
    """Where a bundle's copied parts come from (the repo's folders unless a test says otherwise)."""

    model_config = ConfigDict(frozen=True)
    patches_dir: Path = PATCHES_DIR
    evidence_root: Path = EVIDENCE_DIR
    benchmark: Path = BENCHMARK_SCRIPT


class BundleResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: Path
    manifest: BundleManifest
    files: list[str]


def copy_file(src: Path, dst: Path) -> None:
    """Content and mode (scripts stay executable); timestamps are not part of a bundle."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst)


def _copy_tree(src: Path, dst: Path) -> int:
    rels = list_files(src) if src.is_dir() else []
    for rel in rels:
        copy_file(src / rel, dst / rel)
    return len(rels)


def bundle_evidence_path(rel: str, target: str) -> str:
    """Where an evidence/ file lands in the bundle: the target's own folder at the top of
    evidence/, every other folder (kernels/, images/gb10/, ...) under its own name."""
    own = f"{target}/"
    return rel[len(own):] if rel.startswith(own) else rel


def _copy_evidence(root: Path, target: str, dest: Path) -> None:
    """The files of the claims that apply to ``target``, each folder's README.md (what it holds),
    and a ledger of those claims alone: a bundle ships its own evidence, nothing else."""
    ledger = load_ledger(root)
    claims = ledger.for_target(target)
    # A claim may name several targets' folders (one image record each): the bundle takes its own,
    # and always the files its claims read numbers from.
    others = {t for c in ledger.claims for t in c.targets} - {target}
    files = {rel for rel in ledger.files(target) if not others & set(rel.split("/")[:-1])}
    files |= {n.file for c in claims for n in c.numbers}
    folders = {Path(rel).parent for rel in files}
    readmes = {(folder / FOLDER_README).as_posix() for folder in folders if (root / folder / FOLDER_README).is_file()}
    for rel in sorted(files | readmes):
        copy_file(root / rel, dest / bundle_evidence_path(rel, target))
    if claims:
        rewritten = [c.model_copy(update={"files": [bundle_evidence_path(f, target) for f in c.files if f in files],
                                          "numbers": [n.model_copy(update={"file": bundle_evidence_path(n.file, target)})
                                                      for n in c.numbers if n.file in files]}) for c in claims]
        (dest / CLAIMS_FILE).write_text(ledger_toml(ledger.model_copy(update={"claims": rewritten})))


def build_bundle(
    *, target: str, out: Path, sources: BundleSources | None = None, console: Console | None = None,
    attestations: Path | None = None, signing_key_id: str | None = None,
) -> BundleResult:
    """Write the bundle of `target` to `out`: all of it, or (on any failure) nothing.

    `attestations`: the image-attestation folder to carry as attestations/ (its image is recorded
    in bundle.json and named by the card); `signing_key_id`: the key the bundle is to be signed
    with, which bundle.json and the card name (`builder sign` then refuses any other key)."""
    sources = sources or BundleSources()
    console = console or Console(stderr=True)
    # Checked before anything is rendered or written.
    image = read_image_record(attestations) if attestations is not None else None
    cfg = load_target(target)
    plan = launch_plan(cfg)
    env = make_environment()
    evidence_dir = sources.evidence_root / cfg.target.name

    steps = ["render launch", "copy patches", "copy evidence", "copy benchmark", "render model card", "checksums"]
    progress = Progress(
        TextColumn("[bold]bundle[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        console=console, transient=True,
    )
    with progress, replace_dir(
        out,
        replaceable=bundle_refusal,
        what="bundle",
        error=BundleError,
        refuse_inside=[*SOURCE_TREES, sources.patches_dir, sources.evidence_root],
        notify=lambda line: console.print(f"bundle: {line}", markup=False, highlight=False, soft_wrap=True),
    ) as stage:
        task = progress.add_task(steps[0], total=len(steps))

        def step(i: int) -> None:
            progress.update(task, completed=i, description=steps[i] if i < len(steps) else "done")

        write_text_files(stage, render_launch(cfg=cfg, plan=plan, env=env))
        step(1)
        _copy_tree(sources.patches_dir, stage / BUNDLE_PATCHES)
        step(2)
        _copy_evidence(sources.evidence_root, cfg.target.name, stage / BUNDLE_EVIDENCE)
        step(3)
        if sources.benchmark.is_file():
            copy_file(sources.benchmark, stage / BENCHMARK_NAME)
        if attestations is not None:
            for name in present_files(attestations):
                copy_file(attestations / name, stage / ATTESTATIONS_DIR / name)
        step(4)
        listed = [*list_files(stage), CARD_NAME, BUNDLE_MANIFEST_NAME, CHECKSUMS_NAME]
        capacity, capacity_error = plan_for_card(cfg)
        kernels = sources.evidence_root / KERNEL_EVIDENCE if cfg.patches.apply else None
        ctx = card_context(cfg=cfg, plan=plan, evidence_dir=evidence_dir, files=listed, capacity=capacity,
                           capacity_error=capacity_error, kernels_dir=kernels, image=image, signing_key_id=signing_key_id)
        write_text_files(stage, {CARD_NAME: render_card(ctx, env=env)})
        manifest = make_manifest(cfg, patch_series_sha256=tree_digest(stage / BUNDLE_PATCHES), image=image,
                                 signing_key_id=signing_key_id)
        (stage / BUNDLE_MANIFEST_NAME).write_text(manifest.model_dump_json(indent=2) + "\n")
        step(5)
        files = list_files(stage)
        (stage / CHECKSUMS_NAME).write_text(manifest_text(stage, files))
        step(6)
    return BundleResult(path=Path(out), manifest=manifest, files=[*files, CHECKSUMS_NAME])
