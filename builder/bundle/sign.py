"""Sign a bundle and check its signature with OpenSSF Model Signing (`model_signing`), key method.

`builder sign` writes SIGNATURE_NAME at the bundle root: a Sigstore-format bundle over the sha256
of every bundle file, signed with an ECDSA P-256 key (builder.keys). The signature records that it
leaves out SIGNATURE_NAME and PUBLIC_KEY_NAME, so upstream's own verifier,

    model_signing verify key DIR --signature DIR/model.sig --public_key signing-key.pub

accepts the bundle as built and the Hub repo as published. CHECKSUMS.sha256 proves the files are
intact; the signature proves who made them: a file edited and the manifest re-hashed still fails.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from builder.constants import BUNDLE_MANIFEST_NAME, SIGNATURE_IGNORED, SIGNATURE_NAME
from builder.errors import SignatureError, SigningKeyError, VerifyError
from builder.keys import key_id, load_private_key, load_public_key


class SignResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    signature: Path
    key_id: str
    files: int = Field(description="Bundle files the signature covers.")


class SignatureCheck(BaseModel):
    """The signature row of `builder verify --public-key`."""

    model_config = ConfigDict(frozen=True)
    ok: bool
    key_id: str = Field(description="Id of the public key checked against.")
    detail: str = Field(description="What was checked, or why it failed.")


def _hashing_config():
    from model_signing import hashing

    # Git paths are left out as upstream leaves them out by default: a Hub clone verifies too.
    return hashing.Config().set_ignored_paths(paths=list(SIGNATURE_IGNORED), ignore_git_paths=True)


def sign_bundle(root: Path, *, key: Path) -> SignResult:
    """Sign the bundle at `root` with the private key in `key`. Refused, before anything is written,
    for a key file others may read, and for a bundle that does not verify. An earlier SIGNATURE_NAME
    is replaced; nothing else in the bundle is touched."""
    from builder.bundle.verify import verify_bundle  # verify imports this module

    private = load_private_key(key)  # the mode check comes first, before the file is opened
    kid = key_id(private.public_key())
    del private  # model_signing reads the key itself; no copy of it is kept here
    report = verify_bundle(root)
    try:
        report.raise_for_problems()
    except VerifyError as exc:
        raise type(exc)(f"refusing to sign: {exc.message}", hint=exc.hint) from None
    if report.bundle is None:
        raise VerifyError(f"refusing to sign {root}: its {BUNDLE_MANIFEST_NAME} is not listed", hint="rebuild the bundle")
    named = report.bundle.signing_key_id
    if named is not None and named != kid:
        raise SigningKeyError(
            f"--key {key.name} has key id {kid}, but {root}/{BUNDLE_MANIFEST_NAME} (and its card) name key {named}",
            hint="sign with the key the bundle was built for, or rebuild it with `builder bundle --public-key` of this key",
        )

    from model_signing import signing

    final = root / SIGNATURE_NAME
    # Written beside, then renamed over: an interrupted run leaves the earlier signature as it was.
    # The temporary file appears only after every file was hashed, so it is never signed.
    partial = root / f".{SIGNATURE_NAME}.partial"
    try:
        signing.Config().set_hashing_config(_hashing_config()).use_elliptic_key_signer(private_key=key).sign(root, partial)
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)
    return SignResult(signature=final, key_id=kid, files=report.checked)


def check_signature(root: Path, *, public_key: Path) -> SignatureCheck:
    """Whether SIGNATURE_NAME in `root` signs exactly the bundle's files with `public_key`'s pair.

    Any failure of the verifier on this untrusted file (bad JSON, wrong key, a file changed, added
    or removed) is a failed check, not an error: the caller reports it beside the manifest check."""
    kid = key_id(load_public_key(public_key))
    signature = root / SIGNATURE_NAME
    if not signature.is_file() or signature.is_symlink():
        return SignatureCheck(ok=False, key_id=kid, detail=f"no {SIGNATURE_NAME}: the bundle is not signed")
    from model_signing import verifying

    try:
        verifying.Config().use_elliptic_key_verifier(public_key=public_key).set_hashing_config(_hashing_config()).verify(
            root, signature
        )
    except Exception as exc:  # noqa: BLE001 - every verifier failure on an untrusted signature is a failed check
        text = _summary(str(exc)) or type(exc).__name__
        return SignatureCheck(ok=False, key_id=kid, detail=f"{SIGNATURE_NAME} does not verify with key {kid[:16]}: {text}")
    return SignatureCheck(ok=True, key_id=kid, detail=f"{SIGNATURE_NAME} signs every file, key {kid}")


_EXTRA = re.compile(r"Extra files found in model '[^']*': ([^'\"]+)['\"]")
_MISSING = re.compile(r"Missing files in model '[^']*': ([^'\"]+)['\"]")
_CHANGED = re.compile(r"Hash mismatch for \\?'([^'\\]+)\\?'")


def _summary(text: str) -> str:
    """The verifier's message, with its file differences named briefly (it prints raw digests)."""
    parts = [f"{what}: {m.group(1).strip()}" for what, pattern in (("files not signed", _EXTRA), ("signed files missing", _MISSING))
             if (m := pattern.search(text))]
    changed = _CHANGED.findall(text)
    if changed:
        parts.append("files changed: " + ", ".join(changed))
    return "; ".join(parts) if parts else " ".join(text.split())[:300]


def raise_for_signature(root: Path, check: SignatureCheck) -> None:
    if check.ok:
        return
    raise SignatureError(
        f"{root}: {check.detail}",
        hint="get the bundle again from its source, and the public key from its publisher; a bundle edited after "
             "signing needs `builder sign` by the key's owner",
    )
