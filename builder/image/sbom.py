"""The image's CycloneDX SBOM: the Python wheels of its engine environment and the Debian packages
of its OS base, with the image itself as the metadata component.

Pure data: the packages are read elsewhere (attest.py, from the lock and a container of the image).
"""

from __future__ import annotations

from typing import Iterable

from cyclonedx.model import HashAlgorithm, HashType, Property
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict

from builder.image.lock import EngineLock

#: Component properties this SBOM adds (CycloneDX property names are free text; prefixed as ours).
PROP_SOURCE = "qfn-int8kv:source"
"""Where a component's entry came from: the hash lock (path@sha256) or "installed" (read in the image)."""
PROP_KIND = "qfn-int8kv:kind"
KIND_PYTHON, KIND_DEB = "python-wheel", "deb"


class PythonPackage(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    sha256: tuple[str, ...] = ()
    """Every hash the lock allows; a lock entry that allows one is the file pip installed under
    --require-hashes. Empty for a package read from the image (pip keeps no archive hash)."""
    source: str | None = None
    """The lock it came from when not the SBOM's main one (an add-on lock's path@sha256)."""


class DebPackage(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    arch: str


def packages_from_lock(lock: EngineLock, *, source: str | None = None) -> list[PythonPackage]:
    return [PythonPackage(name=e.name, version=e.version, sha256=(e.sha256,), source=source) for e in lock.entries]


def parse_installed(text: str) -> list[PythonPackage]:
    """`name<TAB>version` lines (what attest.py's listing prints in the image), one per distribution."""
    seen: dict[str, PythonPackage] = {}
    for line in text.splitlines():
        name, _, version = line.strip().partition("\t")
        if name and version:
            seen.setdefault(canonicalize_name(name), PythonPackage(name=name, version=version))
    return sorted(seen.values(), key=lambda p: canonicalize_name(p.name))


def parse_dpkg(text: str) -> list[DebPackage]:
    """`dpkg-query -W -f '${Package}\\t${Version}\\t${Architecture}\\n'` output."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split("\t")
        if len(parts) == 3 and all(parts):
            out.append(DebPackage(name=parts[0], version=parts[1], arch=parts[2]))
    return out


def python_purl(p: PythonPackage) -> PackageURL:
    return PackageURL(type="pypi", name=str(canonicalize_name(p.name)), version=p.version)


def deb_purl(d: DebPackage, *, distro: str) -> PackageURL:
    qualifiers = {"arch": d.arch} | ({"distro": distro} if distro else {})
    return PackageURL(type="deb", namespace="debian", name=d.name, version=d.version, qualifiers=qualifiers)


def build_sbom(
    *,
    image_tag: str,
    image_id: str,
    python: Iterable[PythonPackage],
    python_source: str,
    debs: Iterable[DebPackage],
    distro: str = "",
) -> str:
    """CycloneDX 1.6 JSON. The image is the metadata component; its hash is the image id's sha256."""
    algo, _, hexdigest = image_id.partition(":")
    if algo != "sha256" or len(hexdigest) != 64:
        raise ValueError(f"image id {image_id!r} is not sha256:<64 hex>")
    image = Component(
        name=image_tag.rsplit(":", 1)[0], version=image_tag.rsplit(":", 1)[-1], type=ComponentType.CONTAINER,
        bom_ref=image_id, hashes=[HashType(alg=HashAlgorithm.SHA_256, content=hexdigest)],
        properties=[Property(name="qfn-int8kv:tag", value=image_tag)],
    )  # fmt: skip
    components = []
    for p in python:
        purl = python_purl(p)
        components.append(Component(
            name=p.name, version=p.version, type=ComponentType.LIBRARY, purl=purl, bom_ref=purl.to_string(),
            hashes=[HashType(alg=HashAlgorithm.SHA_256, content=h) for h in p.sha256],
            properties=[Property(name=PROP_KIND, value=KIND_PYTHON), Property(name=PROP_SOURCE, value=p.source or python_source)],
        ))  # fmt: skip
    for d in debs:
        purl = deb_purl(d, distro=distro)
        components.append(Component(
            name=d.name, version=d.version, type=ComponentType.LIBRARY, purl=purl, bom_ref=purl.to_string(),
            properties=[Property(name=PROP_KIND, value=KIND_DEB), Property(name=PROP_SOURCE, value="dpkg-query in the image")],
        ))  # fmt: skip
    bom = Bom(metadata=BomMetaData(component=image), components=components)
    bom.register_dependency(image, components)  # the image holds every package (a flat graph, but a complete one)
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def schema_errors(text: str) -> list[str]:
    """What the CycloneDX 1.6 JSON schema (strict) finds wrong with `text`; empty when it validates."""
    found = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text, all_errors=True)
    if found is None:
        return []
    return [getattr(e.data, "message", str(e.data)) for e in found]


def sbom_image_digest(doc: dict) -> str | None:
    """sha256:<hex> of the metadata component, the image the SBOM describes; None when absent."""
    component = (doc.get("metadata") or {}).get("component") or {}
    for h in component.get("hashes") or []:
        if h.get("alg") == "SHA-256" and h.get("content"):
            return "sha256:" + h["content"]
    return None


def python_components(doc: dict) -> list[dict]:
    return [c for c in doc.get("components") or [] if {"name": PROP_KIND, "value": KIND_PYTHON} in (c.get("properties") or [])]
