"""The bundle README as a Hub model card: checked locally, and marked when gates did not pass."""

from __future__ import annotations

from pathlib import Path

import yaml
from huggingface_hub import ModelCard

from builder import constants
from builder.errors import UnverifiedBundle
from builder.bundle.gates import GateReport, describe_blocking


def load_card(path: Path) -> ModelCard:
    """Parse the card's YAML front matter offline and require the keys the Hub lists releases by.

    ModelCard.validate() would need the network, so only the local parse and the keys are checked.
    """
    if not path.is_file():
        raise UnverifiedBundle(f"{path} is missing", hint="rebuild the bundle with `builder bundle`")
    try:
        card = ModelCard.load(path)
    except (ValueError, yaml.YAMLError) as exc:
        raise UnverifiedBundle(f"{path}: model card metadata does not parse: {exc}", hint="fix builder/bundle/templates/README.md.j2") from exc
    data = card.data.to_dict()
    absent = [key for key in constants.CARD_REQUIRED_KEYS if not data.get(key)]
    if absent:
        raise UnverifiedBundle(f"{path}: model card metadata lacks {', '.join(absent)}", hint="fill them in builder/bundle/templates/README.md.j2")
    if data["library_name"] != "vllm":
        raise UnverifiedBundle(f"{path}: library_name is {data['library_name']!r}, expected 'vllm'", hint="fix builder/bundle/templates/README.md.j2")
    return card


def notes_failed_gates(card: ModelCard) -> bool:
    """Whether the card as built already says its gates did not pass (its tag): then publishing it
    with --allow-failed-gates changes nothing in it, and a signature over it still holds."""
    return constants.CARD_FAILED_GATES_TAG in (card.data.tags or [])


def warn_failed_gates(card: ModelCard, *, report: GateReport, bundle_checksums_sha256: str) -> ModelCard:
    """Put the failed-gates notice first in the card body and tag the metadata, so both the page
    and Hub search show it."""
    notice = (
        "> [!WARNING]\n"
        "> **Quality gates did not pass for this release.** It was published with `--allow-failed-gates`.\n"
        f"> Not passed: {describe_blocking(report)}. The raw records are in `evidence/`.\n"
        "> Do not treat the numbers below as a verified configuration.\n"
        ">\n"
        "> This notice was added when publishing, so `README.md` differs from the bundle as built; its line in\n"
        f"> `{constants.CHECKSUMS_NAME}` was re-hashed (the built bundle's {constants.CHECKSUMS_NAME} had sha256\n"
        f"> `{bundle_checksums_sha256}`).\n\n"
    )
    return _with_notice(card, notice=notice, tag=constants.CARD_FAILED_GATES_TAG)


def warn_unsigned(card: ModelCard, *, reason: str) -> ModelCard:
    """Put the unsigned notice first in the card body and tag the metadata, as for failed gates."""
    notice = (
        "> [!WARNING]\n"
        "> **This release is not signed.** It was published with `--allow-unsigned`: "
        f"{reason}.\n"
        f"> Nothing proves who made these files: `{constants.CHECKSUMS_NAME}` shows only that they are intact.\n\n"
    )
    return _with_notice(card, notice=notice, tag=constants.CARD_UNSIGNED_TAG)


def _with_notice(card: ModelCard, *, notice: str, tag: str) -> ModelCard:
    """A copy of `card` with `notice` first in its body and `tag` in its metadata, so both the page
    and Hub search show it."""
    marked = ModelCard(str(card))
    tags = list(marked.data.tags or [])
    if tag not in tags:
        tags.append(tag)
    marked.data.tags = tags
    marked.text = "\n" + notice + marked.text.lstrip("\n")
    return marked
