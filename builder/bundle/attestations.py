"""`builder bundle --attestations DIR`: the image-attestation folder a bundle carries as attestations/.

The folder is what `builder image --sign-key` writes: image.json ({"tag", "id"}), the SBOM, the
provenance statement and their DSSE envelopes. Only those known files are copied, so nothing else
that happens to sit in the folder ships; the bundle's signature then covers the image id too.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from builder.bundle.manifest import ImageRef
from builder.constants import ATTESTATION_FILES, IMAGE_RECORD_NAME
from builder.errors import BundleError

_FIX = "pass the folder `builder image --sign-key` wrote (it holds image.json with the image's tag and id)"


def read_image_record(folder: Path) -> ImageRef:
    """The image `folder`/image.json names; BundleError naming the file and field at fault."""
    if not folder.is_dir():
        raise BundleError(f"--attestations {folder} is not a folder", hint=_FIX)
    record = folder / IMAGE_RECORD_NAME
    if not record.is_file() or record.is_symlink():
        raise BundleError(f"--attestations {folder} has no {IMAGE_RECORD_NAME} (a regular file)", hint=_FIX)
    try:
        data = json.loads(record.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise BundleError(f"--attestations {record}: not readable JSON ({exc})", hint=_FIX) from None
    if not isinstance(data, dict):
        raise BundleError(f"--attestations {record}: must hold a JSON object with tag and id", hint=_FIX)
    try:
        # Other keys the image step may add are not the bundle's business: only tag and id are recorded.
        return ImageRef(tag=data.get("tag"), id=data.get("id"))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "image"
        raise BundleError(
            f"--attestations {record}: field {field!r}: {first['msg']}",
            hint="image.json needs \"tag\" (the image tag) and \"id\" (\"sha256:<64 hex>\", `docker image inspect -f '{{.Id}}'`); " + _FIX,
        ) from None


def present_files(folder: Path) -> list[str]:
    """The known attestation files that `folder` holds (regular files only), in a fixed order."""
    return [name for name in ATTESTATION_FILES if (folder / name).is_file() and not (folder / name).is_symlink()]
