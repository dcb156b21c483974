"""One error type per failure kind. Each message names the field or thing at fault and the fix.

The CLI maps every ``BuilderError`` to its ``exit_code`` and prints the message without a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class BuilderError(Exception):
    """Base of every expected failure. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message}\n  fix: {hint}")


class ConfigError(BuilderError):
    """A target file is missing, unparsable or breaks a validation rule."""

    exit_code = 2


class RenderError(BuilderError):
    """A template could not be rendered (missing variable, bad template)."""

    exit_code = 3


class BundleError(BuilderError):
    """A bundle cannot be written (destination is not a bundle, bad source)."""

    exit_code = 4


class VerifyError(BuilderError):
    """A bundle does not match its CHECKSUMS.sha256; subclasses say how."""

    exit_code = 10


class ChecksumMismatch(VerifyError):
    """Files were modified, are missing or are not listed."""

    exit_code = 11


class UnsafeManifest(VerifyError):
    """The manifest names an absolute path, a '..' path or a symlink."""

    exit_code = 12


class MalformedManifest(VerifyError):
    """CHECKSUMS.sha256 is absent or a line is not '<sha256>  <path>'."""

    exit_code = 13


class ManifestClaimMismatch(VerifyError):
    """bundle.json or the model card says what the bundle's files contradict (patch-series sha256, target, file list)."""

    exit_code = 14


class PatchError(BuilderError):
    """A patch does not apply, or the engine tree drifted from what the series expects."""

    exit_code = 20


class EngineFetchError(BuilderError):
    """The pinned engine wheel could not be downloaded or failed its sha256."""

    exit_code = 21


class DockerError(BuilderError):
    """The docker daemon is unreachable, or a build failed."""

    exit_code = 30


class ImagePinError(BuilderError):
    """A base image has no @sha256: digest, or the digest cannot be resolved."""

    exit_code = 31


class ServeError(BuilderError):
    """The served endpoint died, answered 503, or never became ready."""

    exit_code = 40


class MeasureError(BuilderError):
    """A benchmark or gate could not run (endpoint gone, bad workload)."""

    exit_code = 50


class GateFailed(BuilderError):
    """A required quality gate failed."""

    exit_code = 51


class PublishError(BuilderError):
    """The bundle may not be published, or the Hub refused it."""

    exit_code = 60


class PublishAuthError(PublishError):
    """No Hub token in the standard places, or the Hub rejected it (401)."""

    exit_code = 61


class PublishPermissionError(PublishError):
    """The token is valid but may not write to this repo (403, or 404 for a repo it cannot see)."""

    exit_code = 62


class PublishNetworkError(PublishError):
    """The Hub could not be reached, or kept failing with transient errors after every retry."""

    exit_code = 63


class UnverifiedBundle(PublishError):
    """The bundle does not match its CHECKSUMS.sha256 (or its manifest or model card is unusable)."""

    exit_code = 64


class GatesNotPassed(PublishError):
    """Required gate evidence is missing or failed, and --allow-failed-gates was not given."""

    exit_code = 65


class UnsignedBundle(PublishError):
    """The bundle has no model.sig, or it does not verify against --public-key, and --allow-unsigned was not given."""

    exit_code = 66


class ModelError(BuilderError):
    """A model could not be downloaded or converted to a servable dir."""

    exit_code = 32


class KernelFitError(BuilderError):
    """A production QSA tile config does not compile, or exceeds the arch's shared memory."""

    exit_code = 22


class LockError(BuilderError):
    """An engine lock is missing, malformed, or does not match what its target pinned."""

    exit_code = 33


class SelfCheckError(BuilderError):
    """The in-image self-check failed: the patched engine or the launch lint refused something."""

    exit_code = 34


class EvidenceError(BuilderError):
    """The evidence ledger does not hold: a claim's file is missing, a number differs, a file is orphaned."""

    exit_code = 70


class SigningKeyError(BuilderError):
    """A signing key is missing, malformed, not ECDSA P-256, or readable by group or others."""

    exit_code = 80


class SignatureError(VerifyError):
    """A signature or attestation does not verify against the given public key (or is missing)."""

    exit_code = 15


class AttestationError(BuilderError):
    """An image's attestations cannot be written: its labels disagree with the target, or the output folder holds other files."""

    exit_code = 81
