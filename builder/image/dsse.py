"""DSSE envelopes (https://github.com/secure-systems-lab/dsse, protocol v1): ECDSA P-256 over PAE.

The signature covers PAE(payloadType, payload), never the JSON of the envelope, so a verifier
checks the exact payload bytes and their declared type together.
"""

from __future__ import annotations

import base64
import binascii

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, ConfigDict, ValidationError

from builder.errors import SignatureError
from builder.keys import key_id

#: What an in-toto Statement and a CycloneDX JSON document are declared as.
INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
CYCLONEDX_PAYLOAD_TYPE = "application/vnd.cyclonedx+json"


class DsseSignature(BaseModel):
    model_config = ConfigDict(frozen=True)

    keyid: str = ""
    sig: str


class DsseEnvelope(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    payload: str
    payloadType: str  # noqa: N815 - the spec's field name
    signatures: list[DsseSignature]


def pae(payload_type: str, payload: bytes) -> bytes:
    """Pre-Authentication Encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body, lengths in
    ASCII decimal bytes."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign(payload: bytes, payload_type: str, key: ec.EllipticCurvePrivateKey) -> DsseEnvelope:
    sig = key.sign(pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    return DsseEnvelope(
        payload=base64.b64encode(payload).decode(),
        payloadType=payload_type,
        signatures=[DsseSignature(keyid=key_id(key.public_key()), sig=base64.b64encode(sig).decode())],
    )


def parse(text: str | bytes, *, name: str) -> DsseEnvelope:
    try:
        return DsseEnvelope.model_validate_json(text)
    except ValidationError as exc:
        raise SignatureError(f"{name} is not a DSSE envelope ({exc.errors()[0]['msg']})",
                             hint="attest the image again (`builder attest --target T --sign-key FILE`)") from None


def verify(envelope: DsseEnvelope, key: ec.EllipticCurvePublicKey, *, name: str, payload_type: str) -> bytes:
    """The payload, once one signature by `key` verifies over PAE(payloadType, payload); SignatureError
    otherwise (a wrong payload type is refused too: a statement signed as another kind is not one)."""
    if envelope.payloadType != payload_type:
        raise SignatureError(f"{name}: payloadType {envelope.payloadType!r}, expected {payload_type!r}",
                             hint="the envelope signs another kind of document; attest the image again")
    try:
        payload = base64.b64decode(envelope.payload, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureError(f"{name}: the payload is not base64", hint="the envelope was altered; attest the image again") from None
    message = pae(envelope.payloadType, payload)
    for signature in envelope.signatures:
        try:
            key.verify(base64.b64decode(signature.sig, validate=True), message, ec.ECDSA(hashes.SHA256()))
            return payload
        except (InvalidSignature, binascii.Error, ValueError):
            continue
    raise SignatureError(
        f"{name}: no signature verifies with key {key_id(key)[:16]}",
        hint="the payload or signature was changed after signing, or it was signed by another key: "
        "pass the public key of the key that attested it",
    )
