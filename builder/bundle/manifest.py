"""bundle.json: what a bundle is for and what it was made from."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import builder
from builder.config import ReleaseConfig, config_digest
from builder.constants import BUNDLE_MANIFEST_NAME, ENV_SOURCE_DATE_EPOCH
from builder.errors import MalformedManifest


class ImageRef(BaseModel):
    """The serving image a bundle was built for, as its attestation folder's image.json names it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tag: str = Field(min_length=1, description="Image tag, e.g. qfn-int8kv:gb10-0.3.1.")
    id: str = Field(pattern=r"^sha256:[0-9a-f]{64}$", description="Image id (config digest), 'sha256:<64 hex>'.")


class BundleManifest(BaseModel):
    """The bundle's identity; CHECKSUMS.sha256 covers it like every other file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = Field(default=1, description="bundle.json format version.")
    target: str = Field(description="Target the bundle was rendered for.")
    bundle_version: str = Field(description="builder version that wrote the bundle.")
    engine_profile: str = Field(description="Engine profile id the launch is made for.")
    engine_version: str = Field(description="Engine version of that profile.")
    kv_cache_dtype: str = Field(description="`--kv-cache-dtype` the launch uses.")
    config_digest: str = Field(description="Digest of the resolved target config (also recorded in evidence).")
    patch_series_sha256: str | None = Field(
        description="sha256 of the sha256sum-format manifest of patches/ (None when the bundle has no patches)."
    )
    created: datetime = Field(description=f"UTC build time ({ENV_SOURCE_DATE_EPOCH} when set).")
    image: ImageRef | None = Field(
        default=None, description="The image the bundle was built for (its attestations/ folder); None: none named."
    )
    signing_key_id: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$",
        description="Key id (sha256 of the public key's DER) the bundle is to be signed with; None: not named at build time.",
    )


def build_time() -> datetime:
    epoch = os.environ.get(ENV_SOURCE_DATE_EPOCH)
    if epoch:
        return datetime.fromtimestamp(int(epoch), tz=timezone.utc)
    return datetime.now(timezone.utc).replace(microsecond=0)


def make_manifest(
    cfg: ReleaseConfig, *, patch_series_sha256: str | None, image: ImageRef | None = None, signing_key_id: str | None = None
) -> BundleManifest:
    engine = cfg.engine.resolved
    return BundleManifest(
        target=cfg.target.name,
        bundle_version=builder.__version__,
        engine_profile=engine.id,
        engine_version=engine.version,
        kv_cache_dtype=cfg.kv_cache.dtype,
        config_digest=config_digest(cfg),
        patch_series_sha256=patch_series_sha256,
        created=build_time(),
        image=image,
        signing_key_id=signing_key_id,
    )


def read_manifest(path: Path) -> BundleManifest:
    file = path / BUNDLE_MANIFEST_NAME
    try:
        return BundleManifest.model_validate_json(file.read_bytes())
    except PermissionError as exc:
        raise MalformedManifest(
            f"{file} cannot be read ({exc.strerror})", hint=f"make it readable (`chmod u+r {file}`), or rebuild the bundle"
        ) from exc
    except (OSError, ValidationError) as exc:
        raise MalformedManifest(f"{file}: not a valid bundle manifest: {exc}", hint="rebuild the bundle") from exc
