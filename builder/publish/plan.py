"""The publish plan: built from the verified upload source, printed as rich tables."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard
from rich.console import Console
from rich.table import Table
from rich.text import Text

from builder import constants
from builder.bundle import BundleManifest
from builder.hashing import sha256_file
from builder.errors import PublishError
from builder.bundle.gates import GateReport
from builder.publish.card import notes_failed_gates
from builder.publish.models import PublishPlan, PublishRequest, ref_name_problem
from builder.publish.signature import Signing
from builder.publish.stage import planned_files


def make_plan(
    *, request: PublishRequest, release: BundleManifest, source_dir: Path, report: GateReport, token_source: str | None,
    signing: Signing, card: ModelCard,
) -> PublishPlan:
    checksums = sha256_file(source_dir / constants.CHECKSUMS_NAME)
    bundle_checksums = sha256_file(request.bundle_dir / constants.CHECKSUMS_NAME)
    card_modified = checksums != bundle_checksums  # the staged card got a warning, and its line was re-hashed
    gates_noted = notes_failed_gates(card)
    tag = request.tag or release.bundle_version
    if problem := ref_name_problem(tag):  # the default tag comes from bundle.json; checked before any Hub call
        raise PublishError(f"bundle_version {tag!r} of {request.bundle_dir} is no tag name: {problem}",
                           hint="pass --tag with a valid tag, e.g. --tag v0.3.1")
    description = [
        f"Release bundle of qfn-int8kv for target {release.target}, version {release.bundle_version}.",
        f"{constants.CHECKSUMS_NAME} sha256: {checksums}; check a download with `sha256sum -c --strict {constants.CHECKSUMS_NAME}`.",
        "Gates: " + ", ".join(f"{g.gate}={g.verdict}" for g in report.gates) + ".",
    ]
    if signing.signed:
        description.append(
            f"Signed with OpenSSF Model Signing, key id {signing.key_id}: "
            f"`model_signing verify key . --signature {constants.SIGNATURE_NAME} --public_key {constants.PUBLIC_KEY_NAME}`."
        )
    else:
        description.append(f"Published with --allow-unsigned: {signing.unsigned_reason}.")
    if release.image is not None:
        description.append(f"Built for image {release.image.tag} ({release.image.id}); attestations in {constants.ATTESTATIONS_DIR}/.")
    if card_modified:
        description.append(
            f"README.md carries a warning added at publish time and its line in "
            f"{constants.CHECKSUMS_NAME} was re-hashed; the bundle as built had {constants.CHECKSUMS_NAME} sha256 {bundle_checksums}."
        )
    return PublishPlan(
        repo=request.repo,
        revision=request.revision,
        private=request.private,
        tag=tag,
        release=release,
        files=planned_files(source_dir),
        commit_message=f"Release {release.target} {release.bundle_version} ({constants.CHECKSUMS_NAME} sha256:{checksums})",
        commit_description="\n\n".join(description),
        checksums_sha256=checksums,
        bundle_checksums_sha256=bundle_checksums,
        gates=report,
        card_modified=card_modified,
        card_notes_failed_gates=gates_noted,
        token_source=token_source,
        signed=signing.signed,
        key_id=signing.key_id,
        unsigned_reason=signing.unsigned_reason,
    )


def show_plan(plan: PublishPlan, *, console: Console) -> None:
    files = Table(title=f"Files to upload ({len(plan.files)}, {_size(plan.total_bytes)})", title_justify="left")
    files.add_column("path")
    files.add_column("size", justify="right")
    for f in plan.files:
        files.add_row(Text(f.path), _size(f.size))
    console.print(files)

    gates = Table(title="Gates", title_justify="left")
    for column in ("gate", "verdict", "required", "summary"):
        gates.add_column(column)
    colour = {"pass": "green", "fail": "red", "missing": "red"}
    for g in plan.gates.gates:
        gates.add_row(Text(g.gate), Text(g.verdict, style=colour[g.verdict]), "yes" if g.required else "no", Text(g.summary))
    console.print(gates)

    summary = Table(title="Publish plan", title_justify="left", show_header=False)
    summary.add_column("what", style="bold")
    summary.add_column("value", overflow="fold")
    summary.add_row("repo", Text(f"https://huggingface.co/{plan.repo} (model; if created: {'private' if plan.private else 'the namespace default visibility'})"))
    summary.add_row("revision", Text(plan.revision))
    summary.add_row("tag", Text(plan.tag))
    summary.add_row("commit message", Text(plan.commit_message))
    summary.add_row("target / version", Text(f"{plan.release.target} / {plan.release.bundle_version}"))
    warnings = [w for w, on in (("failed-gates", not plan.gates.ok and not plan.card_notes_failed_gates),
                                ("unsigned", not plan.signed)) if on]
    as_built = "as built" + (" (it says its gates did not pass)" if plan.card_notes_failed_gates else "")
    summary.add_row("model card", f"[red]{' and '.join(warnings)} warning added at publish time[/]" if plan.card_modified else as_built)
    if plan.signed:
        summary.add_row("signature", Text(f"{constants.SIGNATURE_NAME} verified (key id {plan.key_id}); "
                                          f"public key uploaded as {constants.PUBLIC_KEY_NAME}"))
    else:
        summary.add_row("signature", Text.assemble(("unsigned", "red"), f" (--allow-unsigned): {plan.unsigned_reason}"))
    attest = sorted(f.path for f in plan.files if f.path.startswith(constants.ATTESTATIONS_DIR + "/"))
    image = plan.release.image
    summary.add_row("image", Text(f"{image.tag} ({image.id}); attestations: {', '.join(attest) or 'none'}" if image
                                  else "none named (no attestations)"))
    summary.add_row("stale remote files", "deleted in the same commit (listed at upload time)")
    summary.add_row("token", plan.token_source or "[red]none found[/]: run `hf auth login` or set HF_TOKEN before --yes")
    console.print(summary)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024**2:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024**2:.1f} MiB"
