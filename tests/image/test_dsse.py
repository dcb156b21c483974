"""DSSE: PAE against the spec's vector and securesystemslib's encoder; envelopes we sign verify with
securesystemslib, and a changed payload, signature, type or key does not verify."""

from __future__ import annotations

import base64
import json

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from builder.errors import SignatureError
from builder.image import dsse
from builder.keys import key_id


@pytest.fixture(scope="module")
def key():
    return ec.generate_private_key(ec.SECP256R1())


def test_pae_matches_the_spec_vector():
    # https://github.com/secure-systems-lab/dsse/blob/master/protocol.md#test-cases
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


@pytest.mark.parametrize("payload_type, payload", [
    (dsse.INTOTO_PAYLOAD_TYPE, b'{"_type": "x"}'), ("", b""), ("t\u00e9", "caf\u00e9 \n\x00".encode()),
])  # fmt: skip
def test_pae_agrees_with_securesystemslib(payload_type, payload):
    assert dsse.pae(payload_type, payload) == Envelope(payload=payload, payload_type=payload_type, signatures={}).pae()


def test_our_envelope_verifies_with_securesystemslib_and_ours(key):
    env = dsse.sign(b'{"a": 1}', dsse.INTOTO_PAYLOAD_TYPE, key)
    assert env.signatures[0].keyid == key_id(key.public_key())
    other = Envelope.from_dict(json.loads(env.model_dump_json()))
    sslib_key = SSlibKey.from_crypto(key.public_key(), keyid=env.signatures[0].keyid)
    assert other.verify([sslib_key], 1)  # raises VerificationError on a bad signature
    assert dsse.verify(env, key.public_key(), name="e", payload_type=dsse.INTOTO_PAYLOAD_TYPE) == b'{"a": 1}'


def _flip(b64: str) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[len(raw) // 2] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


@pytest.mark.parametrize("field", ["payload", "sig"])
def test_a_changed_byte_fails(key, field):
    env = dsse.sign(b'{"subject": "sha256:00"}', dsse.INTOTO_PAYLOAD_TYPE, key)
    if field == "payload":
        env = env.model_copy(update={"payload": _flip(env.payload)})
    else:
        env = env.model_copy(update={"signatures": [env.signatures[0].model_copy(update={"sig": _flip(env.signatures[0].sig)})]})
    with pytest.raises(SignatureError, match="no signature verifies"):
        dsse.verify(env, key.public_key(), name="e", payload_type=dsse.INTOTO_PAYLOAD_TYPE)


def test_another_key_and_another_type_fail(key):
    env = dsse.sign(b"{}", dsse.CYCLONEDX_PAYLOAD_TYPE, key)
    with pytest.raises(SignatureError, match="no signature verifies"):
        dsse.verify(env, ec.generate_private_key(ec.SECP256R1()).public_key(), name="e", payload_type=dsse.CYCLONEDX_PAYLOAD_TYPE)
    with pytest.raises(SignatureError, match="payloadType"):
        dsse.verify(env, key.public_key(), name="e", payload_type=dsse.INTOTO_PAYLOAD_TYPE)
    # The type is signed too: relabelling the envelope breaks the signature, not only the type check.
    relabelled = env.model_copy(update={"payloadType": dsse.INTOTO_PAYLOAD_TYPE})
    with pytest.raises(SignatureError, match="no signature verifies"):
        dsse.verify(relabelled, key.public_key(), name="e", payload_type=dsse.INTOTO_PAYLOAD_TYPE)
