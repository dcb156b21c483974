"""Signing keys: ECDSA P-256 in PEM, as OpenSSF Model Signing's docs generate them.

One key signs a release's bundle (through `model_signing`) and its image attestations (DSSE).
The private key is read from disk only here: a key file that group or others may read is refused
before it is opened, and nothing derived from its path but the file name is ever shown.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from builder.errors import SigningKeyError

#: The curve Model Signing's key-based signer and verifier expect.
CURVE = ec.SECP256R1


def key_id(public_key: ec.EllipticCurvePublicKey) -> str:
    """sha256 of the public key's DER SubjectPublicKeyInfo: how bundles and logs name a key."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def generate_key_pair(*, private_path: Path, public_path: Path) -> str:
    """Write a new key pair (private key mode 0600, created exclusively; public key 0644) and return
    its key id. An existing file at either path is never overwritten."""
    for option, path in (("--out", private_path), ("--public-out", public_path)):
        if path.exists() or path.is_symlink():
            raise SigningKeyError(f"{option} {path} exists; a key file is never overwritten",
                                  hint="pick a new path, or remove the old key yourself if you mean to replace it")
        if not path.parent.is_dir():
            raise SigningKeyError(f"{option} {path}: folder {path.parent} does not exist", hint="create it first")
    key = ec.generate_private_key(CURVE())
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_exclusive(private_path, private_pem, mode=0o600)
    try:
        _write_exclusive(public_path, public_pem, mode=0o644)
    except BaseException:
        private_path.unlink()  # written by this call a moment ago: no half pair is left behind
        raise
    return key_id(key.public_key())


def _write_exclusive(path: Path, data: bytes, *, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot create ({exc.strerror})", hint="pick a writable folder") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, mode)  # the umask may have narrowed the public key's mode


def check_private_key_file(path: Path, *, option: str = "--key") -> Path:
    """`path` if it is a regular file only its owner may read or write; refused otherwise, before
    it is opened. ``option``: how the command that was given the key names it."""
    try:
        st = path.stat()
    except OSError as exc:
        raise SigningKeyError(f"{option} {path.name}: {exc.strerror}", hint="pass the private key file `builder keygen` wrote") from None
    if not stat.S_ISREG(st.st_mode):
        raise SigningKeyError(f"{option} {path.name} is not a regular file", hint="pass the private key file `builder keygen` wrote")
    if st.st_mode & 0o077:
        raise SigningKeyError(
            f"{option} {path.name} is readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):o})",
            hint=f"chmod 600 {path}",
        )
    return path


def load_private_key(path: Path, *, option: str = "--key") -> ec.EllipticCurvePrivateKey:
    """The P-256 private key in `path` (PEM, unencrypted), after `check_private_key_file`."""
    check_private_key_file(path, option=option)
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError, OSError):
        raise SigningKeyError(f"{option} {path.name} is not an unencrypted PEM private key",
                              hint="generate one with `builder keygen --out FILE`") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, CURVE):
        raise SigningKeyError(f"{option} {path.name} is not an ECDSA P-256 key", hint="generate one with `builder keygen --out FILE`")
    return key


def load_public_key(path: Path) -> ec.EllipticCurvePublicKey:
    """The P-256 public key in `path` (PEM SubjectPublicKeyInfo)."""
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise SigningKeyError(f"--public-key {path}: {exc.strerror}", hint="pass the public key file `builder keygen` wrote") from None
    except ValueError:
        raise SigningKeyError(f"--public-key {path} is not a PEM public key", hint="pass the .pub file `builder keygen` wrote") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, CURVE):
        raise SigningKeyError(f"--public-key {path} is not an ECDSA P-256 key", hint="pass the .pub file `builder keygen` wrote")
    return key
