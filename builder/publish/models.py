"""Typed inputs and outputs of the publish step: the request, the bundle's release info, the plan."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from builder import constants
from builder.bundle import BundleManifest
from builder.errors import PublishError


class PublishRequest(BaseModel):
    """What the user asked for on the command line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bundle_dir: Path = Field(description="A bundle directory written by `builder bundle`.")
    repo: str = Field(description="Hub model repo, 'org/name'.")
    revision: str = Field(default="main", min_length=1, description="Branch to commit to; created when absent.")
    private: bool = Field(default=False, description="Create the repo private; otherwise a new repo gets the namespace default. An existing repo keeps its visibility.")
    tag: str | None = Field(default=None, min_length=1, description="Tag for the commit; default: the bundle version.")
    yes: bool = Field(default=False, description="Upload; without it only the plan is printed.")
    allow_failed_gates: bool = Field(default=False, description="Publish despite missing or failed gates, with a warning card.")

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, value: str) -> str:
        if value.count("/") != 1:
            raise ValueError(f"{value!r} is not 'org/name'")
        try:
            validate_repo_id(value)
        except HFValidationError as exc:
            raise ValueError(str(exc)) from exc
        return value

    @classmethod
    def parse(cls, **fields: object) -> PublishRequest:
        """Build a request, turning a validation failure into a PublishError naming the option."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            option = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "arguments"
            raise PublishError(f"{option}: {first['msg']}", hint="see `builder publish --help`") from exc


class GateStatus(BaseModel):
    """One gate as publish sees it."""

    gate: str
    verdict: str = Field(description="pass, fail, or missing (no evidence file).")
    required: bool = Field(description="Blocks publishing when not passed.")
    summary: str = ""


class GateReport(BaseModel):
    """Every gate's status; `ok` when no blocking gate is missing or failed."""

    gates: list[GateStatus]

    @property
    def blocking(self) -> list[GateStatus]:
        return [g for g in self.gates if g.required and g.verdict != "pass"]

    @property
    def ok(self) -> bool:
        return not self.blocking


class PlannedFile(BaseModel):
    path: str = Field(description="Path in the repo (POSIX, relative).")
    size: int


class PublishPlan(BaseModel):
    """Everything an upload will do, printed in a dry run and followed exactly with --yes."""

    repo: str
    revision: str
    private: bool
    tag: str
    release: BundleManifest
    files: list[PlannedFile]
    commit_message: str
    commit_description: str
    checksums_sha256: str = Field(description=f"sha256 of the uploaded {constants.CHECKSUMS_NAME}.")
    bundle_checksums_sha256: str = Field(description=f"sha256 of the bundle's own {constants.CHECKSUMS_NAME}.")
    gates: GateReport
    card_modified: bool = Field(description="The model card got a failed-gates warning at publish time.")
    token_source: str | None = Field(description="Where the token will come from; never the token itself.")

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)
