"""`builder image`: resolve the base, assemble the context, build with the docker SDK showing live
progress, run the in-image self-check (GPU targets), and only then tag the image.

The image is built under a candidate tag; a failed self-check removes that candidate (this call
built it), so a tag of `qfn-int8kv:<target>-<version>` always names an image that passed.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound
from pydantic import BaseModel, ConfigDict
from rich.console import Console

from builder.config import ReleaseConfig
from builder.constants import DOCKER_SLOW_API_TIMEOUT_S, EMULATION_PRELOAD, KERNEL_REPORTS_DIR, REPO_ROOT
from builder.errors import DockerError, SelfCheckError
from builder.image.base import check_ca_bundle, emulation_needed, ensure_lock_base, load_pinned_addons, load_pinned_lock
from builder.image.context import assemble_context
from builder.image.daemon import daemon_arch, docker_client
from builder.image.extract import extract_file
from builder.image.labels import image_labels
from builder.image.recipe import BuildRecipe, build_recipe


#: Where compile-kernels leaves its report inside the image (see Dockerfile, stage 1).
KERNEL_REPORT_IN_IMAGE = "/opt/qfn/kernels/compile-report.json"


class BuiltImage(BaseModel):
    model_config = ConfigDict(frozen=True)

    tag: str
    id: str
    labels: dict[str, str]
    seconds: float
    """The image build proper (docker build), without the base and the self-check."""
    base_seconds: float = 0.0
    """Building the base from the lock (0 when it was reused or pulled)."""
    selfcheck_seconds: float = 0.0
    emulated: bool = False
    platform: str = ""
    size_bytes: int = 0
    layers: int = 0
    selfcheck_output: str | None = None
    kernel_report: Path | None = None
    log: list[str] = []


class BuildLog:
    """Prints like a Console and keeps every line, so the build log can go to evidence."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.lines: list[str] = []

    def print(self, text: str = "", **kwargs) -> None:
        # Tags, paths and build output are user text: printed literally, never as rich markup.
        kwargs.setdefault("markup", False)
        kwargs.setdefault("highlight", False)
        self.lines.append(str(text))
        self.console.print(text, **kwargs)


def build_image(
    *,
    cfg: ReleaseConfig,
    ca_bundle: Path | None = None,
    console: Console | None = None,
    reports_dir: Path = KERNEL_REPORTS_DIR,
    repo_root: Path = REPO_ROOT,
    selfcheck: bool = True,
) -> BuiltImage:
    check_ca_bundle(ca_bundle)  # an argument: checked before the daemon is contacted
    log = BuildLog(console or Console(stderr=True))
    recipe = build_recipe(cfg)  # refuses an unpinned base first: nothing else matters then
    lock, addons = None, ()
    if recipe.base_source == "wheel-lock":  # the lock files must still be the bytes that were pinned
        lock = load_pinned_lock(path=repo_root / cfg.target.base_lock_path, digest=recipe.base_pin.split("@", 1)[1])
        addons = load_pinned_addons(pins=recipe.addon_pins, engine=lock, repo_root=repo_root)
    client = docker_client(timeout=DOCKER_SLOW_API_TIMEOUT_S)
    arch = recipe.platform.split("/", 1)[1]
    emulated = emulation_needed(client, arch)
    if emulated:
        log.print(
            f"image: {recipe.platform} on a linux/{daemon_arch(client)} docker daemon: every RUN step runs under "
            "QEMU user emulation (binfmt_misc), several times slower than native",
            highlight=False,
            soft_wrap=True,
        )
        log.print(
            f"image: stage 1 and the self-check preload {EMULATION_PRELOAD} (docker/emulation/hide-host-cpu-caches.c): "
            "without it aarch64 torch faults on import under Debian's QEMU 7.2 on an x86_64 host",
            highlight=False,
            soft_wrap=True,
        )
    with tempfile.TemporaryDirectory(prefix="qfn-build-") as tmp:
        # The context is checked before the base is built: a missing input fails in seconds, not after an hour.
        probe = recipe if recipe.base_image else recipe.with_base(image_id="sha256:" + "0" * 64, name="(lock base, not built yet)")
        ctx = assemble_context(cfg=cfg, recipe=probe, out=Path(tmp) / "ctx", ca_bundle=ca_bundle, repo_root=repo_root)
        base_seconds = 0.0
        if lock is not None:
            base = ensure_lock_base(lock=lock, addons=addons, ca_bundle=ca_bundle, console=log, repo_root=repo_root)  # type: ignore[arg-type]
            recipe = recipe.with_base(image_id=base.id, name=base.tag)
            base_seconds = base.seconds
        else:
            # Checked last, so "base image missing" means every other input of the build is in place.
            _require_base(client, recipe)
        labels = image_labels(cfg=cfg, recipe=recipe, repo_root=repo_root)
        candidate = f"{recipe.tag}-candidate-{os.getpid()}"
        log.print(f"image: building {recipe.tag} from {recipe.base_name or recipe.base_image} ({recipe.base_image})", soft_wrap=True)
        start = time.monotonic()
        _sdk_build(client=client, ctx=ctx, recipe=recipe, tag=candidate, labels=labels, log=log, start=start, emulated=emulated)
        seconds = time.monotonic() - start
    try:
        log.print(f"image: docker build took {seconds:.0f} s" + (" under QEMU emulation" if emulated else ""), soft_wrap=True)
        check_out, check_seconds = None, 0.0
        if selfcheck and recipe.apply_patches:
            check_out, check_seconds = run_selfcheck(client=client, image=candidate, log=log, emulated=emulated)
        client.images.get(candidate).tag(*recipe.tag.rsplit(":", 1))
    finally:
        _untag(client, candidate)
    image = client.images.get(recipe.tag)
    layers = len(image.attrs.get("RootFS", {}).get("Layers", []))
    log.print(
        f"image: {recipe.tag} ({image.short_id}): {image.attrs.get('Size', 0) / 1e9:.2f} GB, {layers} layers; "
        f"base {base_seconds:.0f} s + build {seconds:.0f} s + self-check {check_seconds:.0f} s"
        + (f" (linux/{arch} under QEMU emulation)" if emulated else ""),
        soft_wrap=True,
    )
    report = None
    if recipe.kernel_arch:  # the name it keeps in evidence/kernels/ when `--evidence` copies it there
        dest = reports_dir / f"image-aot-{recipe.target}-{recipe.kernel_arch}.json"
        report = extract_file(client=client, image=recipe.tag, path=KERNEL_REPORT_IN_IMAGE, dest=dest)
        log.print(f"image: kernel compile report -> {report}", soft_wrap=True)
    return BuiltImage(
        tag=recipe.tag, id=image.id, labels=image.labels or {}, seconds=seconds, base_seconds=base_seconds,
        selfcheck_seconds=check_seconds, emulated=emulated, platform=recipe.platform, size_bytes=int(image.attrs.get("Size", 0)),
        layers=layers, selfcheck_output=check_out, kernel_report=report, log=log.lines,
    )  # fmt: skip


def run_selfcheck(*, client: docker.DockerClient, image: str, log: BuildLog, emulated: bool = False) -> tuple[str, float]:
    """`qfn-selfcheck` in a throwaway container of ``image``, no network; SelfCheckError when it fails."""
    log.print(f"image: self-check of {image} (CPU, no network" + (", under QEMU emulation" if emulated else "") + ")", soft_wrap=True)
    start = time.monotonic()
    environment = {"LD_PRELOAD": EMULATION_PRELOAD} if emulated else None
    container = client.containers.run(image, ["qfn-selfcheck"], detach=True, network_mode="none", environment=environment)
    try:
        lines = []
        for raw in container.logs(stream=True, follow=True):
            for line in raw.decode(errors="replace").splitlines():
                lines.append(line)
                log.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
        code = container.wait()["StatusCode"]
    finally:
        container.remove(force=True)
    seconds = time.monotonic() - start
    output = "\n".join(lines) + "\n"
    if code != 0:
        failed = [ln for ln in lines if ln.startswith("FAIL")]
        raise SelfCheckError(
            f"self-check of {image} failed (exit {code}): " + ("; ".join(failed) or "\n".join(lines[-10:])),
            hint="the engine's own message is above; fix the target (or the patch series) and rebuild. "
            "The candidate image is removed, so no tag names an image that failed",
        )
    return output, seconds


def _untag(client: docker.DockerClient, tag: str) -> None:
    """Drop a candidate tag this build created; the image itself stays while the final tag names it."""
    try:
        client.images.remove(tag, noprune=False)
    except (ImageNotFound, APIError):
        pass


def _require_base(client: docker.DockerClient, recipe: BuildRecipe) -> None:
    """The classic builder would try to pull a missing base mid-build; say clearly what is missing."""
    assert recipe.base_image is not None
    try:
        client.images.get(recipe.base_image)
        return
    except ImageNotFound:
        pass
    try:
        client.images.pull(recipe.base_image)
    except APIError as exc:
        raise DockerError(
            f"base image {recipe.base_image} of target {recipe.target} is not on this host and could not "
            f"be pulled ({exc.explanation or exc}); it is the only input missing for this build",
            hint=f"`docker pull {recipe.base_image}` where its registry is reachable (then `docker save` | "
            "`docker load` to bring it here), or re-pin to an image you have: set target.base_image to its "
            f"tag and run `builder pin --target {recipe.target}`; or build the base from the engine lock here: "
            f'base_source = "wheel-lock" (README, Image and serve)',
        ) from exc


def build_args(recipe: BuildRecipe, *, emulated: bool) -> dict[str, str]:
    """The recipe's build args, plus the emulation preload when the build runs under QEMU."""
    return {**recipe.buildargs, **({"QFN_EMULATION_PRELOAD": EMULATION_PRELOAD} if emulated else {})}


def _sdk_build(
    *,
    client: docker.DockerClient,
    ctx: Path,
    recipe: BuildRecipe,
    tag: str,
    labels: dict[str, str],
    log: BuildLog,
    start: float,
    emulated: bool,
) -> None:
    """The classic builder. A foreign-arch build needs no buildx: the base carries its arch, and its
    RUN steps execute through QEMU's binfmt_misc entry (checked by emulation_needed)."""
    tail: list[str] = []
    stream = client.api.build(
        path=str(ctx),
        tag=tag,
        buildargs=build_args(recipe, emulated=emulated),
        labels=labels,
        rm=True,
        forcerm=True,
        pull=False,
        decode=True,
        platform=recipe.platform if emulated else None,
    )
    for chunk in stream:
        if "error" in chunk:
            raise DockerError(
                f"docker build of {recipe.tag} failed: " + "\n".join([*tail, chunk["error"]]),
                hint="the step and its output are shown above",
            )
        line = chunk.get("stream", "").rstrip()
        if not line:
            continue
        tail = (tail + [line])[-15:]
        if line.startswith("Step "):
            elapsed = time.monotonic() - start
            log.print(f"[{elapsed:5.0f}s] {line}", style="bold", highlight=False, markup=False, soft_wrap=True)
        else:
            log.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)
