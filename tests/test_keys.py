"""Signing keys: a pair written with owner-only private mode, never over an existing file; a
private key others may read, or of another kind, refused with the fix before it is used."""

from __future__ import annotations

import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from builder.errors import SigningKeyError
from builder.keys import check_private_key_file, generate_key_pair, key_id, load_private_key, load_public_key


@pytest.fixture
def pair(tmp_path):
    priv, pub = tmp_path / "release.key", tmp_path / "release.pub"
    kid = generate_key_pair(private_path=priv, public_path=pub)
    return priv, pub, kid


def test_a_new_pair_is_p256_with_an_owner_only_private_key(pair):
    priv, pub, kid = pair
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert stat.S_IMODE(pub.stat().st_mode) == 0o644
    private, public = load_private_key(priv), load_public_key(pub)
    assert isinstance(private.curve, ec.SECP256R1)
    assert key_id(private.public_key()) == key_id(public) == kid and len(kid) == 64


def test_an_existing_file_is_never_overwritten(pair, tmp_path):
    priv, pub, _ = pair
    before = priv.read_bytes()
    with pytest.raises(SigningKeyError, match="never overwritten"):
        generate_key_pair(private_path=priv, public_path=tmp_path / "other.pub")
    assert priv.read_bytes() == before and not (tmp_path / "other.pub").exists()
    with pytest.raises(SigningKeyError, match="--public-out"):
        generate_key_pair(private_path=tmp_path / "new.key", public_path=pub)
    assert not (tmp_path / "new.key").exists()


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o602])
def test_a_key_group_or_others_may_touch_is_refused_with_the_fix(pair, mode):
    priv, _, _ = pair
    priv.chmod(mode)
    with pytest.raises(SigningKeyError) as exc:
        load_private_key(priv)
    assert f"mode {mode:o}" in exc.value.message and exc.value.hint == f"chmod 600 {priv}"
    # the message shown names the file, not where it lives
    assert str(priv.parent) not in exc.value.message


def test_the_owner_only_modes_pass(pair):
    priv, _, _ = pair
    for mode in (0o600, 0o400):
        priv.chmod(mode)
        assert check_private_key_file(priv) == priv


def test_keys_of_another_kind_are_refused(tmp_path):
    ed = ed25519.Ed25519PrivateKey.generate()
    path = tmp_path / "ed.key"
    path.write_bytes(ed.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    path.chmod(0o600)
    with pytest.raises(SigningKeyError, match="not an ECDSA P-256 key"):
        load_private_key(path)
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    pub = tmp_path / "p384.pub"
    pub.write_bytes(p384.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(SigningKeyError, match="not an ECDSA P-256 key"):
        load_public_key(pub)
    (tmp_path / "junk.key").write_text("not a key")
    (tmp_path / "junk.key").chmod(0o600)
    with pytest.raises(SigningKeyError, match="not an unencrypted PEM private key"):
        load_private_key(tmp_path / "junk.key")
