"""`builder image`: assemble the context and build with the docker SDK, showing live progress."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import docker
from docker.errors import APIError, ImageNotFound
from pydantic import BaseModel, ConfigDict
from rich.console import Console

from builder.config import ReleaseConfig
from builder.constants import EVIDENCE_DIR, REPO_ROOT
from builder.errors import DockerError
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
    kernel_report: Path | None = None


def build_image(
    *,
    cfg: ReleaseConfig,
    ca_bundle: Path | None = None,
    console: Console | None = None,
    evidence_dir: Path = EVIDENCE_DIR,
    repo_root: Path = REPO_ROOT,
) -> BuiltImage:
    console = console or Console(stderr=True)
    recipe = build_recipe(cfg)  # refuses an unpinned base first: nothing else matters then
    client = docker_client()
    cross = _check_arch(client, recipe)
    labels = image_labels(cfg=cfg, recipe=recipe, repo_root=repo_root)
    with tempfile.TemporaryDirectory(prefix="qfn-build-") as tmp:
        ctx = assemble_context(cfg=cfg, recipe=recipe, out=Path(tmp) / "ctx", ca_bundle=ca_bundle, repo_root=repo_root)
        # Checked last, so "base image missing" means every other input of the build is in place.
        _require_base(client, recipe)
        console.print(f"image: building {recipe.tag} from {recipe.base_image}", soft_wrap=True, markup=False)
        start = time.monotonic()
        if cross:
            _buildx(ctx=ctx, recipe=recipe, labels=labels, console=console)
        else:
            _sdk_build(client=client, ctx=ctx, recipe=recipe, labels=labels, console=console, start=start)
        seconds = time.monotonic() - start
    image = client.images.get(recipe.tag)
    console.print(f"image: built {recipe.tag} ({image.short_id}) in {seconds:.0f} s", soft_wrap=True)
    report = None
    if recipe.kernel_arch:  # the AOT compile report also goes to evidence/, beside the kernel benchmarks
        dest = evidence_dir / "kernels" / f"image-aot-{recipe.target}-{recipe.kernel_arch}.json"
        report = extract_file(client=client, image=recipe.tag, path=KERNEL_REPORT_IN_IMAGE, dest=dest)
        console.print(f"image: kernel compile report -> {report}", soft_wrap=True, markup=False)
    return BuiltImage(tag=recipe.tag, id=image.id, labels=image.labels or {}, seconds=seconds, kernel_report=report)


def _check_arch(client: docker.DockerClient, recipe: BuildRecipe) -> bool:
    """True when the build is cross-arch (and buildx is there to do it)."""
    host = daemon_arch(client)
    want = recipe.platform.split("/", 1)[1]
    if host == want:
        return False
    if shutil.which("docker") is None or subprocess.run(
        ["docker", "buildx", "version"], capture_output=True, check=False
    ).returncode != 0:
        raise DockerError(
            f"target {recipe.target} is {recipe.platform} but the docker daemon is linux/{host}, "
            "and docker buildx is not installed",
            hint=f"build on an {want} host, or install buildx and QEMU binfmt "
            "(apt-get install docker-buildx qemu-user-static) for a cross-arch build",
        )
    return True


def _require_base(client: docker.DockerClient, recipe: BuildRecipe) -> None:
    """The classic builder would try to pull a missing base mid-build; say clearly what is missing."""
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
            f"tag and run `builder pin --target {recipe.target}`",
        ) from exc


def _sdk_build(
    *, client: docker.DockerClient, ctx: Path, recipe: BuildRecipe, labels: dict[str, str], console: Console, start: float
) -> None:
    tail: list[str] = []
    stream = client.api.build(
        path=str(ctx),
        tag=recipe.tag,
        buildargs=recipe.buildargs,
        labels=labels,
        rm=True,
        forcerm=True,
        pull=False,
        decode=True,
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
            console.print(f"[{elapsed:5.0f}s] {line}", style="bold", highlight=False, markup=False, soft_wrap=True)
        else:
            console.print(f"  {line}", highlight=False, markup=False, soft_wrap=True)


def _buildx(*, ctx: Path, recipe: BuildRecipe, labels: dict[str, str], console: Console) -> None:
    cmd = ["docker", "buildx", "build", "--platform", recipe.platform, "--load", "-t", recipe.tag, "--progress", "plain"]
    for k, v in recipe.buildargs.items():
        cmd += ["--build-arg", f"{k}={v}"]
    for k, v in labels.items():
        cmd += ["--label", f"{k}={v}"]
    cmd.append(str(ctx))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        console.print(f"  {line.rstrip()}", highlight=False, markup=False, soft_wrap=True)
        tail = (tail + [line.rstrip()])[-15:]
    if proc.wait() != 0:
        raise DockerError(f"docker buildx build of {recipe.tag} failed: " + "\n".join(tail))
