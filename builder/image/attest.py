"""Signed attestations of a built image: a CycloneDX SBOM and a SLSA v1 provenance statement, each
in a DSSE envelope, checkable against the local image with `builder verify-image`.

`attest_image` works on an image that is already built and tagged (`builder image --sign-key`
calls it right after the build; `builder attest` on its own): everything it states is read from the
image (id, labels, Debian packages) or from the pinned inputs the labels name (the engine lock).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import docker
from docker.errors import ImageNotFound
from pydantic import BaseModel, ConfigDict, ValidationError
from rich.console import Console

from builder import __version__
from builder.atomic import replace_dir
from builder.config import ReleaseConfig
from builder.constants import (
    ATTESTATION_FILES,
    DOCKER_SLOW_API_TIMEOUT_S,
    ENVELOPE_SUFFIX,
    IMAGE_RECORD_NAME,
    OCI_LABEL_PREFIX,
    PROVENANCE_NAME,
    QFN_LABEL_PREFIX,
    REPO_ROOT,
    SBOM_NAME,
)
from builder.errors import AttestationError, DockerError, SignatureError
from builder.image import dsse
from builder.image.base import LABEL_ADDON_LOCK, addon_labels, emulation_needed, load_pinned_addons, load_pinned_lock
from builder.image.build import build_args
from builder.image.daemon import docker_client
from builder.image.provenance import ProvenanceInputs, SourceCommit, provenance_statement
from builder.image.recipe import build_recipe
from builder.image.sbom import build_sbom, packages_from_lock, parse_dpkg, parse_installed, python_components, sbom_image_digest
from builder.keys import check_private_key_file, key_id, load_private_key, load_public_key

#: Where `builder image --sign-key` and `builder attest` write, under the repo root.
DEFAULT_ATTEST_DIR = Path("dist") / "images"

_SECTION = "### qfn-attest "
#: Run in a throwaway container of the image, no network: the Debian packages, the distro, and (when
#: no hash lock names the engine's wheels) the distributions the engine's interpreter sees.
_PROBE = (
    "set -eu; echo '" + _SECTION + "dpkg'; dpkg-query -W -f '${Package}\\t${Version}\\t${Architecture}\\n'; "
    "echo '" + _SECTION + "os'; . /etc/os-release; echo \"${ID:-}-${VERSION_ID:-}\"; "
)
_LIST_PY = ("import importlib.metadata as m\n"
            "for d in m.distributions(): print(d.metadata['Name'], d.version, sep='\\t')\n")


class ImageRef(BaseModel):
    """image.json: which image the folder attests."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tag: str
    id: str


class Attested(BaseModel):
    model_config = ConfigDict(frozen=True)

    out_dir: Path
    image: ImageRef
    key_id: str
    python_packages: int
    debian_packages: int
    python_source: str


def default_attest_dir(target: str, repo_root: Path = REPO_ROOT) -> Path:
    return repo_root / DEFAULT_ATTEST_DIR / target


def attestation_refusal(folder: Path) -> str | None:
    """None when `folder` is an attestation folder this module wrote (only its files, image.json readable)."""
    others = sorted(p.name for p in folder.iterdir() if p.name not in ATTESTATION_FILES or not p.is_file() or p.is_symlink())
    if others:
        return f"it holds {', '.join(others[:5])}, which an attestation folder does not"
    try:
        ImageRef.model_validate_json((folder / IMAGE_RECORD_NAME).read_text())
    except (OSError, ValidationError):
        return f"its {IMAGE_RECORD_NAME} is missing or not one this builder wrote"
    return None


def attest_image(
    *,
    cfg: ReleaseConfig,
    sign_key: Path,
    out_dir: Path | None = None,
    repo_root: Path = REPO_ROOT,
    client: docker.DockerClient | None = None,
    console: Console | None = None,
) -> Attested:
    """Attest the tagged image of `cfg` (built before) into `out_dir` (default dist/images/<target>/)."""
    key = load_sign_key(sign_key)  # refused (group/other readable, not P-256) before docker is asked anything
    console = console or Console(stderr=True)
    recipe = build_recipe(cfg)
    out_dir = out_dir or default_attest_dir(cfg.target.name, repo_root)
    client = client or docker_client(timeout=DOCKER_SLOW_API_TIMEOUT_S)
    image = _local_image(client, recipe.tag, option="--target", hint=f"build it first: `builder image --target {cfg.target.name}`")
    labels = image.labels or {}
    qfn = lambda k: labels.get(f"{QFN_LABEL_PREFIX}.{k}", "")  # noqa: E731
    oci = lambda k: labels.get(f"{OCI_LABEL_PREFIX}.{k}", "")  # noqa: E731
    if qfn("target") != cfg.target.name:
        raise AttestationError(f"image {recipe.tag} is labelled for target {qfn('target') or '(none)'!r}, not {cfg.target.name!r}",
                               hint=f"rebuild it: `builder image --target {cfg.target.name}`")

    lock, addons = None, ()
    if recipe.base_source == "wheel-lock":
        if qfn("base.lock") != recipe.base_pin:
            raise AttestationError(
                f"image {recipe.tag} was built from lock {qfn('base.lock') or '(none)'}, the target now pins {recipe.base_pin}",
                hint=f"rebuild the image from the pinned lock: `builder image --target {cfg.target.name} --sign-key FILE`",
            )
        built_addons = {k: v for k, v in labels.items() if k.startswith(LABEL_ADDON_LOCK + ".")}
        if built_addons != addon_labels(recipe.addon_pins):
            raise AttestationError(
                f"image {recipe.tag} was built with the add-on locks {' '.join(sorted(built_addons.values())) or '(none)'}, "
                f"the target now pins {' '.join(recipe.addon_pins) or '(none)'}",
                hint=f"rebuild the image from the pinned locks: `builder image --target {cfg.target.name} --sign-key FILE`",
            )
        lock = load_pinned_lock(path=repo_root / cfg.target.base_lock_path, digest=recipe.base_pin.split("@", 1)[1])
        addons = load_pinned_addons(pins=recipe.addon_pins, engine=lock, repo_root=repo_root)
        recipe = recipe.with_base(image_id=oci("base.digest"), name=oci("base.name"))
    elif oci("base.digest") != recipe.base_pin.rpartition("@")[2]:
        raise AttestationError(
            f"image {recipe.tag} was built FROM {oci('base.digest') or '(no base label)'}, the target now pins {recipe.base_pin}",
            hint=f"rebuild the image from the pinned base: `builder image --target {cfg.target.name} --sign-key FILE`",
        )

    probe = _PROBE + ("" if lock else f"echo '{_SECTION}python'; {shlex.quote(recipe.engine.python)} -c {shlex.quote(_LIST_PY)}; ")
    sections = _run_probe(client, recipe.tag, probe)
    if lock is not None:  # the engine lock's wheels, then each add-on's, every one with its locked hash
        python, python_source = packages_from_lock(lock), recipe.base_pin
        for addon, pin in zip(addons, recipe.addon_pins):
            python += packages_from_lock(addon, source=pin)
    else:  # no hash lock pins this engine's environment (pip resolves ENGINE_SPEC at build time): list what is installed
        python, python_source = parse_installed(sections.get("python", "")), "installed (no hash lock)"
    debs = parse_dpkg(sections.get("dpkg", ""))
    ref = ImageRef(tag=recipe.tag, id=image.id)
    sbom = build_sbom(image_tag=ref.tag, image_id=ref.id, python=python, python_source=python_source, debs=debs,
                      distro=sections.get("os", "").strip().strip("-"))

    revision = oci("revision") or "unknown"
    emulated = emulation_needed(client, recipe.platform.split("/", 1)[1])
    statement = provenance_statement(ProvenanceInputs(
        image_tag=ref.tag, image_id=ref.id, target=cfg.target.name, platform=recipe.platform,
        build_args=build_args(recipe, emulated=emulated), emulated=emulated, base_source=recipe.base_source,
        base_pin=recipe.base_pin, base_image=recipe.base_image or "", addon_pins=recipe.addon_pins, patch_series_sha256=_sha256_or_none(qfn("patch-series.sha256")),
        builder_version=oci("version") or __version__,
        source=SourceCommit(uri=_without_credentials(oci("source")) or "unknown", commit=revision.removesuffix("-dirty"), dirty=revision.endswith("-dirty")),
        started_on=_rfc3339(oci("created")), finished_on=_rfc3339(image.attrs.get("Created", "")),
    ))  # fmt: skip
    provenance = json.dumps(statement, indent=2) + "\n"

    with replace_dir(out_dir, replaceable=attestation_refusal, what="attestation", error=AttestationError,
                     notify=lambda line: console.print(f"attest: {line}", markup=False, highlight=False, soft_wrap=True)) as stage:
        (stage / IMAGE_RECORD_NAME).write_text(ref.model_dump_json(indent=2) + "\n")
        for name, text, kind in ((SBOM_NAME, sbom, dsse.CYCLONEDX_PAYLOAD_TYPE), (PROVENANCE_NAME, provenance, dsse.INTOTO_PAYLOAD_TYPE)):
            (stage / name).write_text(text)
            envelope = dsse.sign(text.encode(), kind, key)
            (stage / (name + ENVELOPE_SUFFIX)).write_text(envelope.model_dump_json(indent=2) + "\n")
    return Attested(out_dir=out_dir, image=ref, key_id=key_id(key.public_key()), python_packages=len(python),
                    debian_packages=len(debs), python_source=" + ".join([python_source, *recipe.addon_pins]))


def check_sign_key(path: Path) -> Path:
    """`path` if it may be a --sign-key (builder.keys' rules), before anything is built or asked of docker."""
    return check_private_key_file(path, option="--sign-key")


def load_sign_key(path: Path):
    return load_private_key(path, option="--sign-key")


class Check(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    ok: bool
    detail: str


def verify_image(
    *, image: str, public_key: Path, attestations: Path | None = None, client: docker.DockerClient | None = None,
    repo_root: Path = REPO_ROOT,
) -> list[Check]:
    """Check the attestations in `attestations` (default dist/images/<the image's target>/) against
    the LOCAL image `image`. Returns every check; the caller raises on a failed one (`require_all`)."""
    key = load_public_key(public_key)
    client = client or docker_client(timeout=DOCKER_SLOW_API_TIMEOUT_S)
    local = _local_image(client, image, option="IMAGE", hint="pass a local image tag or id (`docker image ls`)")
    if attestations is None:
        target = (local.labels or {}).get(f"{QFN_LABEL_PREFIX}.target")
        if not target:
            raise SignatureError(f"image {image} carries no {QFN_LABEL_PREFIX}.target label to find its attestations by",
                                 hint="pass --attestations DIR")
        attestations = default_attest_dir(target, repo_root)
    missing = [n for n in ATTESTATION_FILES if not (attestations / n).is_file()]
    if missing:
        raise SignatureError(f"--attestations {attestations}: {', '.join(missing)} missing",
                             hint="attest the image: `builder attest --target T --sign-key FILE` (or pass the folder that holds them)")

    checks: list[Check] = []
    payloads: dict[str, bytes | None] = {}
    for name, kind in ((PROVENANCE_NAME, dsse.INTOTO_PAYLOAD_TYPE), (SBOM_NAME, dsse.CYCLONEDX_PAYLOAD_TYPE)):
        envelope_name = name + ENVELOPE_SUFFIX
        try:
            payload = dsse.verify(dsse.parse((attestations / envelope_name).read_bytes(), name=envelope_name), key,
                                  name=envelope_name, payload_type=kind)
            checks.append(Check(name=f"{envelope_name} signature", ok=True, detail=f"key {key_id(key)[:16]}, {kind}"))
        except SignatureError as exc:
            payload = None
            checks.append(Check(name=f"{envelope_name} signature", ok=False, detail=exc.message))
        payloads[name] = payload
        same = payload is not None and (attestations / name).read_bytes() == payload
        checks.append(Check(name=f"{name} is the signed payload", ok=same,
                            detail="identical" if same else "differs from the payload its envelope signs" if payload else "no verified payload"))

    subject = _from_signed(payloads[PROVENANCE_NAME], lambda d: "sha256:" + d["subject"][0]["digest"]["sha256"])
    checks.append(_digest_check("provenance subject digest", subject, local.id))
    sbom_digest = _from_signed(payloads[SBOM_NAME], sbom_image_digest)
    checks.append(_digest_check("SBOM image digest", sbom_digest, local.id))
    python = _from_signed(payloads[SBOM_NAME], lambda d: str(len(python_components(d))))
    checks.append(Check(name="SBOM Python packages", ok=python is not None and python != "0", detail=python or "unreadable"))
    return checks


def require_all(checks: list[Check], *, image: str) -> None:
    failed = [c for c in checks if not c.ok]
    if failed:
        raise SignatureError(
            f"image {image}: {len(failed)} of {len(checks)} checks failed: " + "; ".join(f"{c.name}: {c.detail}" for c in failed),
            hint="the attestations were changed, signed by another key, or made for another image: "
            "verify with the right --public-key, or attest this image again",
        )


def _from_signed(payload: bytes | None, read) -> str | None:
    if payload is None:
        return None
    try:
        return read(json.loads(payload))
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def _digest_check(name: str, found: str | None, image_id: str) -> Check:
    if found is None:
        return Check(name=name, ok=False, detail="not in a verified payload")
    return Check(name=name, ok=found == image_id, detail=found if found == image_id else f"{found}, the image is {image_id}")


def _local_image(client: docker.DockerClient, ref: str, *, option: str, hint: str):
    try:
        return client.images.get(ref)
    except ImageNotFound:
        raise DockerError(f"{option}: image {ref} is not on this docker host", hint=hint) from None


def _run_probe(client: docker.DockerClient, image: str, script: str) -> dict[str, str]:
    container = client.containers.run(image, [script], entrypoint=["sh", "-c"], detach=True, network_mode="none")
    try:
        code = container.wait()["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    if code != 0:
        raise DockerError(f"reading the packages of {image} failed (exit {code}): {err.strip()[-500:]}",
                          hint="the image needs sh, dpkg-query and its engine's python; rebuild it with `builder image`")
    sections: dict[str, str] = {}
    current = None
    for line in out.splitlines(keepends=True):
        if line.startswith(_SECTION):
            current = line[len(_SECTION):].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line
    return sections


def _sha256_or_none(value: str) -> str | None:
    value = value.removeprefix("sha256:")
    return value if re.fullmatch(r"[0-9a-f]{64}", value) else None


def _rfc3339(value: str) -> str:
    """Seconds precision, UTC as Z: docker's nanoseconds and isoformat's +00:00 both become RFC 3339."""
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)", value or "")
    return m[1] + "Z" if m else ""


def _without_credentials(url: str) -> str:
    """A remote URL with any user:token@ part removed: a clone URL may carry a token."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@", r"\1", url)
