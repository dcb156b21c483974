"""The image's SLSA v1 provenance, as an in-toto Statement v1 (https://slsa.dev/spec/v1.0/provenance).

Pure data from typed inputs: only the documented build args and digests go in, so nothing a
build was given privately (the CA bundle, the environment, a token) can reach the statement.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
#: What a consumer reads externalParameters/internalParameters against (docs/images.md, Attestations).
BUILD_TYPE = "urn:qfn-int8kv:image-build:v1"
#: The builder's identity; its version is a resolved dependency.
BUILDER_ID = "urn:qfn-int8kv:builder"


class SourceCommit(BaseModel):
    model_config = ConfigDict(frozen=True)

    uri: str
    """The repository (remote.origin.url, or "unknown")."""
    commit: str
    dirty: bool


class ProvenanceInputs(BaseModel):
    model_config = ConfigDict(frozen=True)

    image_tag: str
    image_id: str
    target: str
    platform: str
    build_args: dict[str, str]
    """The Dockerfile's ARGs as `builder image` passes them (builder/image/recipe.py)."""
    emulated: bool
    base_source: str
    base_pin: str
    """name@sha256:<registry digest>, or lock path@sha256:<file digest>."""
    base_image: str
    """The image FROM names: the pinned ref, or the id of the base built from the lock."""
    addon_pins: tuple[str, ...] = ()
    """Each add-on lock installed over the engine lock, path@sha256:<file digest>."""
    patch_series_sha256: str | None
    builder_version: str
    source: SourceCommit
    started_on: str
    finished_on: str


def _digest(value: str) -> dict[str, str]:
    algo, _, hexdigest = value.rpartition("@")[2].partition(":")
    return {algo: hexdigest}


def provenance_statement(p: ProvenanceInputs) -> dict:
    algo, _, hexdigest = p.image_id.partition(":")
    deps: list[dict] = []
    if p.base_source == "wheel-lock":
        deps.append({"name": "base-lock", "uri": p.base_pin.split("@", 1)[0], "digest": _digest(p.base_pin)})
        deps += [{"name": "addon-lock", "uri": pin.split("@", 1)[0], "digest": _digest(pin)} for pin in p.addon_pins]
    deps.append({"name": "base-image", "uri": p.base_image.split("@", 1)[0] if "@" in p.base_image else p.base_image,
                 "digest": _digest(p.base_pin if p.base_source == "image" else p.base_image)})
    if p.patch_series_sha256:
        deps.append({"name": "patch-series", "uri": "bundle/patches", "digest": {"sha256": p.patch_series_sha256}})
    deps.append({"name": "builder", "uri": f"pkg:pypi/qfn-int8kv-builder@{p.builder_version}",
                 "annotations": {"version": p.builder_version}})
    commit = {"name": "source", "uri": f"git+{p.source.uri}", "annotations": {"dirty": p.source.dirty}}
    if p.source.commit != "unknown":
        commit["digest"] = {"gitCommit": p.source.commit}
    deps.append(commit)
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": p.image_tag, "digest": {algo: hexdigest}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"target": p.target, "platform": p.platform, "buildArgs": dict(sorted(p.build_args.items()))},
                "internalParameters": {"emulated": p.emulated, "baseSource": p.base_source, "dockerfile": "Dockerfile"},
                "resolvedDependencies": deps,
            },
            "runDetails": {
                "builder": {"id": BUILDER_ID, "version": {"qfn-int8kv-builder": p.builder_version}},
                "metadata": {"invocationId": f"{p.image_tag}@{p.image_id}", "startedOn": p.started_on, "finishedOn": p.finished_on},
            },
        },
    }
