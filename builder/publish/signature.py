"""Whether a bundle is published signed: its model.sig must verify against --public-key, unless
--allow-unsigned (then the card says so at the top, and no signature is uploaded)."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard
from pydantic import BaseModel, ConfigDict, Field

from builder import constants
from builder.bundle.sign import check_signature
from builder.errors import UnsignedBundle
from builder.publish.card import notes_failed_gates
from builder.bundle.gates import GateReport
from builder.publish.models import PublishRequest

_HINT = ("sign it (`builder sign BUNDLE --key FILE`) and pass --public-key FILE.pub, "
         "or pass --allow-unsigned to publish it with a warning at the top of the card")


class Signing(BaseModel):
    """How the release is published: signed (model.sig and the public key uploaded) or not, and why not."""

    model_config = ConfigDict(frozen=True)
    signed: bool
    key_id: str | None = Field(default=None, description="Id of --public-key, when given.")
    public_key: Path | None = Field(default=None, description="Uploaded as signing-key.pub when signed.")
    unsigned_reason: str | None = Field(default=None, description="Why it is published unsigned (the card's warning says it).")


def assess_signing(request: PublishRequest, *, report: GateReport, card: ModelCard) -> Signing:
    """Refuse (UnsignedBundle) a bundle without a signature that verifies against --public-key,
    unless --allow-unsigned; the bundle already matched its CHECKSUMS.sha256."""
    root = request.bundle_dir
    key = request.public_key
    if key is None:
        reason = "no --public-key was given, so its signature was not checked"
        kid = None
    else:
        check = check_signature(root, public_key=key)
        kid = check.key_id
        reason = None if check.ok else check.detail
    if reason is None and not report.ok and not notes_failed_gates(card):
        # The failed-gates warning changes README.md, which the signature covers.
        reason = (f"--allow-failed-gates adds a warning to {constants.CARD_NAME}, which {constants.SIGNATURE_NAME} signs, "
                  "so the signature would not verify")
    if reason is None:
        return Signing(signed=True, key_id=kid, public_key=key)
    if not request.allow_unsigned:
        raise UnsignedBundle(f"{root} may not be published unsigned: {reason}; nothing was uploaded", hint=_HINT)
    return Signing(signed=False, key_id=kid, unsigned_reason=reason)
