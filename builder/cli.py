"""Thin command line: parse arguments, call one function per command, map errors to exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from builder import bundle as bundle_step
from builder import config
from builder.bundle.render import render_to
from builder.constants import DEFAULT_TARGET, PATCHES_DIR, PUBLISH_TIMEOUT_S
from builder.errors import BuilderError

app = typer.Typer(
    name="builder",
    help="Build, verify and publish the qfn-int8kv serving release.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    add_completion=False,
)
err_console = Console(stderr=True)
out_console = Console()


@app.callback()
def _root() -> None:
    """Build, verify and publish the qfn-int8kv serving release."""


@app.command()
def schema(
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the JSON Schema here instead of stdout."),
) -> None:
    """Export the JSON Schema of the target config (every field with its description)."""
    text = json.dumps(config.json_schema(), indent=2) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)


# --- render, bundle, verify, checksums ---


@app.command()
def render(
    target: str = typer.Option(DEFAULT_TARGET, "--target", "-t", help="Target name (targets/<name>.toml) or a .toml path."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write launch/, README.md and CHECKSUMS.sha256 into; written atomically, only ever replacing an earlier render."),
) -> None:
    """Render the launch script, launch/ENV.md and the model card of one target."""
    for path in render_to(target=target, out=out):
        out_console.print(f"wrote {path}", highlight=False, soft_wrap=True, markup=False)


@app.command("bundle")
def bundle_cmd(
    target: str = typer.Option(DEFAULT_TARGET, "--target", "-t", help="Target name (targets/<name>.toml) or a .toml path."),
    out: Path = typer.Option(..., "--out", "-o", help="Bundle folder; written atomically, only ever replacing an earlier bundle."),
    attestations: Path | None = typer.Option(
        None, "--attestations", help="Image-attestation folder (`builder image --sign-key`): copied as attestations/, its image named in bundle.json."
    ),
    public_key: Path | None = typer.Option(
        None, "--public-key", help="Public key the bundle will be signed with: bundle.json and the card name its key id."
    ),
) -> None:
    """Assemble a checksummed release bundle: README.md, launch/, patches/, evidence/, bundle.json."""
    from builder.keys import key_id, load_public_key

    kid = key_id(load_public_key(public_key)) if public_key is not None else None
    result = bundle_step.build_bundle(target=target, out=out, attestations=attestations, signing_key_id=kid)
    m = result.manifest
    out_console.print(
        f"[bold green]bundle[/] {escape(str(result.path))}: {len(result.files)} files, target {m.target}, "
        f"{m.engine_profile}, kv {m.kv_cache_dtype}, image {escape(m.image.tag + ' ' + m.image.id) if m.image else 'none named'}"
        f"\n  check it: python -m builder verify {escape(str(result.path))}",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def keygen(
    out: Path = typer.Option(..., "--out", help="Private key file to create (mode 0600; never overwritten)."),
    public_out: Path | None = typer.Option(None, "--public-out", help="Public key file to create (default: --out with .pub appended)."),
) -> None:
    """Create an ECDSA P-256 signing key pair for `builder sign` (and image attestations)."""
    from builder.keys import generate_key_pair

    public = public_out if public_out is not None else out.with_name(out.name + ".pub")
    kid = generate_key_pair(private_path=out, public_path=public)
    out_console.print(f"key id {kid}\n  private key: {out} (keep it secret)\n  public key: {public}",
                      markup=False, highlight=False, soft_wrap=True)


@app.command()
def sign(
    directory: Path = typer.Argument(..., help="A bundle folder that verifies (`builder verify DIR`)."),
    key: Path = typer.Option(..., "--key", help="Private key file (`builder keygen`), readable by its owner only."),
) -> None:
    """Sign a bundle with OpenSSF Model Signing (ECDSA P-256 key): writes model.sig at its root,
    replacing an earlier one; refuses a bundle that does not verify."""
    from builder.bundle.sign import sign_bundle

    result = sign_bundle(directory, key=key)
    out_console.print(
        f"signed {result.signature} ({result.files} files, key id {result.key_id})\n"
        f"  check it: python -m builder verify {directory} --public-key PUBLIC_KEY_FILE",
        markup=False, highlight=False, soft_wrap=True,
    )


@app.command()
def verify(
    # readable=False: an unreadable folder is verify's own finding (exit 13, with the fix), not a usage error.
    directory: Path = typer.Argument(..., readable=False, help="A bundle folder (holds CHECKSUMS.sha256 and bundle.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
    public_key: Path | None = typer.Option(
        None, "--public-key", help="Also check model.sig against this public key (exit 15 when only the signature fails)."
    ),
) -> None:
    """Check a bundle against its CHECKSUMS.sha256 (modified, missing, unexpected and unreadable files),
    what its bundle.json and card claim (patch-series sha256, target, file list), and with
    --public-key its signature (model.sig)."""
    from rich.table import Table

    from builder.constants import SIGNATURE_NAME

    report = bundle_step.verify_bundle(directory, public_key=public_key)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    elif public_key is not None:
        # One row per check, so a user sees which one failed.
        checks = Table(title=Text(f"{directory}: verify"))
        checks.add_column("check")
        checks.add_column("result")
        checks.add_column("detail")
        files = report.file_problems()
        sig = report.signature
        rows = [
            ("manifest", not files, f"{report.checked} files match CHECKSUMS.sha256" if not files
             else "; ".join(f"{k} {p}" for k, p in files[:10]) + (f" (+{len(files) - 10} more)" if len(files) > 10 else "")),
            ("claims", not report.claims, "bundle.json's claims hold" if report.bundle is not None and not report.claims
             else "not checked: bundle.json is not intact" if report.bundle is None
             else "; ".join(f"{c.claim} {c.path} ({c.detail})" for c in report.claims)),
            ("signature", sig is not None and sig.ok, sig.detail if sig is not None else ""),
        ]
        for name, ok, detail in rows:
            checks.add_row(name, Text("ok", style="bold green") if ok else Text("FAILED", style="bold red"), Text(detail))
        out_console.print(checks)
    elif report.ok:
        unsigned = "not signed" if not report.signed else f"{SIGNATURE_NAME} not checked (pass --public-key FILE)"
        out_console.print(
            f"[bold green]ok[/] {escape(str(directory))}: {report.checked} files match CHECKSUMS.sha256"
            + (", and bundle.json's claims hold" if report.bundle is not None else "") + f"; signature: {unsigned}",
            highlight=False, soft_wrap=True,
        )
    else:
        title = "differs from CHECKSUMS.sha256" if report.file_problems() else "contradicts its bundle.json or card"
        table = Table(title=Text(f"{directory}: {title}"))
        table.add_column("problem", style="bold red")
        table.add_column("file")
        for kind, path in report.problems():
            table.add_row(kind, Text(path))
        out_console.print(table)
    report.raise_for_problems()


@app.command()
def checksums() -> None:
    """Rewrite the repo's CHECKSUMS.sha256 over bundle/, evidence/, Dockerfile and docker/."""
    path = bundle_step.write_repo_checksums()
    out_console.print(f"wrote {path} ({len(bundle_step.shipped_files())} files)", highlight=False, soft_wrap=True, markup=False)

@app.command("publish")
def publish_cmd(
    bundle_dir: Path = typer.Argument(..., help="Bundle directory written by `builder bundle`."),
    repo: str = typer.Option(..., "--repo", help="Hub model repo, 'org/name'."),
    revision: str = typer.Option("main", "--revision", help="Branch to commit to (created when absent)."),
    private: bool = typer.Option(False, "--private", help="Create the repo private (an existing repo keeps its visibility)."),
    tag: str | None = typer.Option(None, "--tag", help="Tag for the commit (default: the bundle version)."),
    yes: bool = typer.Option(False, "--yes", help="Upload. Without it, only the plan is printed (dry run)."),
    allow_failed_gates: bool = typer.Option(
        False, "--allow-failed-gates", help="Publish despite missing or failed gates; the model card then says so at the top."
    ),
    timeout: float = typer.Option(
        PUBLISH_TIMEOUT_S, "--timeout", help="Seconds the Hub part may take in all (every call, retry and backoff); then exit 63."
    ),
    public_key: Path | None = typer.Option(
        None, "--public-key", help="Public key model.sig must verify against (exit 66 otherwise); uploaded as signing-key.pub."
    ),
    allow_unsigned: bool = typer.Option(
        False, "--allow-unsigned", help="Publish without a signature that verifies; the model card then says so at the top."
    ),
) -> None:
    """Publish a verified bundle to the Hugging Face Hub (dry run unless --yes)."""
    # Imported here so other commands do not pay for importing huggingface_hub.
    from builder.publish import PublishRequest, publish

    request = PublishRequest.parse(
        bundle_dir=bundle_dir, repo=repo, revision=revision, private=private, tag=tag, yes=yes,
        allow_failed_gates=allow_failed_gates, timeout_s=timeout, public_key=public_key, allow_unsigned=allow_unsigned,
    )
    publish(request=request)


# --- image / serve / wait / pin ---
@app.command()
def image(
    target: str = typer.Option(..., "--target", "-t", help="Target name (targets/<name>.toml) or a .toml path."),
    ca_bundle: Path | None = typer.Option(
        None, "--ca-bundle", help="PEM bundle pip inside the build trusts (TLS-intercepting proxy); not kept in the image."
    ),
    evidence: bool = typer.Option(
        False, "--evidence", help="Write build.json, labels.json, selfcheck.txt and the log tail to evidence/images/<target>/, "
        "and a GPU image's kernel compile report to evidence/kernels/ (without it: dist/kernel-reports/ only).",
    ),
    sign_key: Path | None = typer.Option(
        None, "--sign-key", help="ECDSA P-256 private key (`builder keygen`, mode 600): sign an SBOM and a SLSA provenance of the built image."
    ),
    attest_out: Path | None = typer.Option(None, "--attest-out", help="Attestation folder (default dist/images/<target>/); needs --sign-key."),
) -> None:
    """Build the serving image qfn-int8kv:<target>-<version> with the docker SDK (GPU targets: base from
    the pinned image or engine lock, patches, AOT kernels, then the in-image self-check before tagging)."""
    from builder.constants import EVIDENCE_DIR, KERNEL_EVIDENCE
    from builder.errors import AttestationError
    from builder.image import build_image
    from builder.image.base import check_ca_bundle
    from builder.image.attest import check_sign_key
    from builder.image.evidence import write_image_evidence

    check_ca_bundle(ca_bundle)  # before the daemon is asked anything
    if sign_key is not None:
        check_sign_key(sign_key)  # a key others may read is refused before an hour of build
    elif attest_out is not None:
        raise AttestationError("--attest-out needs --sign-key", hint="pass --sign-key FILE (`builder keygen --out FILE`)")
    cfg = config.load_target(target)
    built = build_image(cfg=cfg, ca_bundle=ca_bundle, console=err_console)
    if evidence:
        for path in write_image_evidence(
            built=built, target=cfg.target.name, base_pin=config.require_pinned_base(cfg),
            base_source=cfg.target.base_source, out_dir=EVIDENCE_DIR / "images" / cfg.target.name,
            kernels_dir=EVIDENCE_DIR / KERNEL_EVIDENCE,
        ):  # fmt: skip
            err_console.print(f"evidence: {path}", highlight=False, soft_wrap=True)
    if sign_key is not None:
        _attest(cfg=cfg, sign_key=sign_key, out=attest_out)
    typer.echo(built.tag)


def _attest(*, cfg, sign_key: Path, out: Path | None) -> None:
    from builder.image.attest import attest_image

    done = attest_image(cfg=cfg, sign_key=sign_key, out_dir=out, console=err_console)
    err_console.print(
        f"attest: {done.image.tag} ({done.image.id}) -> {done.out_dir}: SBOM of {done.python_packages} Python "
        f"({done.python_source}) and {done.debian_packages} Debian packages, SLSA provenance; DSSE-signed by key {done.key_id[:16]}",
        highlight=False, markup=False, soft_wrap=True,
    )


@app.command()
def attest(
    target: str = typer.Option(..., "--target", "-t", help="Target name (targets/<name>.toml) or a .toml path."),
    sign_key: Path = typer.Option(..., "--sign-key", help="ECDSA P-256 private key (`builder keygen`, mode 600)."),
    out: Path | None = typer.Option(None, "--attest-out", help="Attestation folder (default dist/images/<target>/)."),
) -> None:
    """Write the signed SBOM and SLSA provenance of the target's image, already built and tagged on this host."""
    from builder.image.attest import check_sign_key

    check_sign_key(sign_key)  # before the daemon is asked anything
    _attest(cfg=config.load_target(target), sign_key=sign_key, out=out)


@app.command("verify-image")
def verify_image_cmd(
    image: str = typer.Argument(..., help="Local image tag or id, e.g. qfn-int8kv:cpu-smoke-0.1.0."),
    public_key: Path = typer.Option(..., "--public-key", help="PEM public key of the key that attested the image."),
    attestations: Path | None = typer.Option(
        None, "--attestations", help="Attestation folder (default dist/images/<the image's target>/)."
    ),
) -> None:
    """Check an image's attestations against the local image: both DSSE signatures, the payloads, and
    that the provenance subject and the SBOM name this image's id (exit 15 when a check fails)."""
    from rich.table import Table

    from builder.image.attest import require_all, verify_image

    checks = verify_image(image=image, public_key=public_key, attestations=attestations)
    table = Table(title=f"verify-image {image}", title_justify="left")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")  # digests are compared by eye: never cut short
    for c in checks:
        table.add_row(Text(c.name), Text("ok" if c.ok else "FAIL", style="green" if c.ok else "bold red"), Text(c.detail))
    out_console.print(table, soft_wrap=True)
    require_all(checks, image=image)


@app.command()
def lint(
    target: str = typer.Option(..., "--target", "-t", help="A GPU target (vllm-0.33.0 engine)."),
) -> None:
    """Launch lint without an image: the target's rendered launch command through vLLM 0.33.0's own
    parser and config builders, in a cached venv of the locked engine without CUDA."""
    from builder.image.lintenv import ensure_lint_venv, lint_target

    cfg = config.load_target(target)
    python = ensure_lint_venv(log=lambda m: err_console.print(m, highlight=False, soft_wrap=True))
    typer.echo(lint_target(cfg=cfg, python=python), nl=False)


@app.command()
def selfcheck(
    image: str | None = typer.Option(None, "--image", help="A built GPU image (default: the target's tag)."),
    target: str | None = typer.Option(None, "--target", "-t", help="Target whose image to check."),
) -> None:
    """Run the in-image self-check (patched engine checks + launch lint) on a built GPU image, on CPU."""
    from builder.errors import ConfigError
    from builder.constants import DOCKER_SLOW_API_TIMEOUT_S
    from builder.image.build import BuildLog, run_selfcheck
    from builder.image.daemon import docker_client
    from builder.image.recipe import image_tag

    if image is None:
        if target is None:
            raise ConfigError("selfcheck needs --image or --target", hint="e.g. builder selfcheck --target h200")
        image = image_tag(config.load_target(target))
    run_selfcheck(client=docker_client(timeout=DOCKER_SLOW_API_TIMEOUT_S), image=image, log=BuildLog(err_console))


@app.command()
def serve(
    target: str = typer.Option(..., "--target", "-t", help="Target name or .toml path."),
    model_dir: Path | None = typer.Option(None, "--model-dir", help="Local model snapshot (mounted read-only)."),
    ple_dir: Path | None = typer.Option(
        None,
        "--ple-dir",
        help="Host dir for the PLE table files of targets that memory-map the table (mounted read-write; "
        "the engine writes only its own *.pletable files).",
    ),
    bind: str = typer.Option("127.0.0.1", "--bind", help="Host address the port is published on."),
    port: int | None = typer.Option(None, "--port", help="Host port (default: the target's server.port)."),
    timeout: float = typer.Option(45 * 60, "--timeout", help="Seconds to wait for ready before giving up."),
    name: str | None = typer.Option(None, "--name", help="Container name (default qfn-int8kv-<target>); with --stop, the one to stop."),
    memory: str | None = typer.Option(
        None, "--memory", help="Cap the container's memory (e.g. 100g): an OOM kill instead of a host lock-up."
    ),
    stop: bool = typer.Option(
        False, "--stop", help="Stop and remove the server started under --name (default qfn-int8kv-<target>) instead."
    ),
    env: list[str] = typer.Option([], "--env", "-e", help="NAME=VALUE for the engine, this run only (repeatable)."),
    cors_origin: list[str] = typer.Option([], "--cors-origin", help="Browser origin allowed to call the API (repeatable)."),
    log_level: str | None = typer.Option(None, "--log-level", help="Engine and HTTP log level: debug, info, warning, error."),
    extra_args: list[str] | None = typer.Argument(None, help="After --: extra vLLM flags, appended to the launch."),
) -> None:
    """Run the target's image and wait until /health and /v1/models say it serves.

    The API key is read from VLLM_API_KEY (never a flag): the container gets it, the wait sends it.
    """
    from builder import serve as serving
    from builder.config.overrides import LaunchOverrides

    cfg = config.load_target(target)
    if stop:
        removed = serving.stop(target=cfg.target.name, name=name)
        if removed is None:
            wanted = serving.container_name(target=cfg.target.name, name=name)
            err_console.print(f"serve: nothing to stop, no container named {wanted}", markup=False, highlight=False)
        else:
            typer.echo(f"removed {removed}")
        return
    overrides = LaunchOverrides.parse(env=env, extra_args=extra_args or [], cors_origins=cors_origin, log_level=log_level)
    try:
        served = serving.serve(
            cfg=cfg, model_dir=model_dir, ple_dir=ple_dir, bind=bind, host_port=port, timeout_s=timeout, name=name,
            memory=memory, overrides=overrides,
        )
    except serving.Interrupted as exc:  # the container is already removed; exit as the signal would
        err_console.print(f"serve: interrupted by {exc}", highlight=False, markup=False)
        raise typer.Exit(128 + exc.signum) from None
    typer.echo(served.url)


@app.command()
def wait(
    url: str = typer.Option(..., "--url", help="Base URL of a server started elsewhere, e.g. http://127.0.0.1:8000."),
    served_name: str | None = typer.Option(None, "--served-name", help="Model id /v1/models must list."),
    target: str | None = typer.Option(None, "--target", "-t", help="Take the served name from this target."),
    timeout: float = typer.Option(45 * 60, "--timeout", help="Seconds to wait before giving up."),
) -> None:
    """Wait for an OpenAI-compatible endpoint to be ready (503, 401 and 403 fail at once).

    A server started with an API key needs it in VLLM_API_KEY.
    """
    from builder.errors import ServeError
    from builder.serve import wait_ready

    name = served_name or (config.load_target(target).model.served_name if target else None)
    if name is None:
        raise ServeError("wait needs the model name to look for", hint="pass --served-name NAME or --target X")
    wait_ready(url=url, served_name=name, timeout_s=timeout)


@app.command()
def pin(
    target: str = typer.Option(..., "--target", "-t", help="Target name or .toml path to pin."),
    source: str | None = typer.Option(
        None, "--source", help="Switch target.base_source first: image (a pulled base image) or wheel-lock (docker/locks/)."
    ),
) -> None:
    """Pin the target's base: base_image to its registry digest, or base_lock and each of addon_locks to its file digest."""
    from builder.image import pin_target

    if source not in (None, "image", "wheel-lock"):
        raise typer.BadParameter("--source is image or wheel-lock")
    typer.echo(pin_target(target=target, source=source))


# --- base: GPU engine bases from hash-locked PyPI wheels ---
base_app = typer.Typer(help="Engine bases from hash-locked PyPI wheels (base_source = wheel-lock).", no_args_is_help=True)
app.add_typer(base_app, name="base")


@base_app.command("lock")
def base_lock(
    platform: str = typer.Option(..., "--platform", help="linux/amd64 or linux/arm64 (arm64 runs under QEMU on x86_64)."),
    ca_bundle: Path | None = typer.Option(None, "--ca-bundle", help="PEM bundle pip trusts (mounted read-only, never kept)."),
    addon: str | None = typer.Option(
        None, "--addon", help="NAME==VERSION (e.g. ray==2.60.0): resolve an add-on lock over the platform's engine lock "
        "instead, every engine pin a constraint; writes docker/locks/<name>-<version>-linux-<arch>.txt."
    ),
) -> None:
    """Resolve vllm==0.33.0 and every dependency with the platform's own pip; write docker/locks/<engine>-linux-<arch>.txt."""
    from builder.constants import ENGINE_UPSTREAM_VERSION
    from builder.image.base import check_ca_bundle, lock_path, resolve_addon_lock, resolve_lock

    if platform not in ("linux/amd64", "linux/arm64"):
        raise typer.BadParameter("--platform is linux/amd64 or linux/arm64")
    check_ca_bundle(ca_bundle)
    arch = platform.split("/", 1)[1]
    if addon is not None:
        engine_lock = lock_path(engine=f"vllm-{ENGINE_UPSTREAM_VERSION}", arch=arch)
        out = resolve_addon_lock(arch=arch, ca_bundle=ca_bundle, console=err_console, addon=addon, engine_lock=engine_lock)
    else:
        out = resolve_lock(arch=arch, ca_bundle=ca_bundle, console=err_console, engine=f"vllm=={ENGINE_UPSTREAM_VERSION}")
    typer.echo(out)


@base_app.command("build")
def base_build(
    target: str = typer.Option(..., "--target", "-t", help="A target with base_source = wheel-lock."),
    ca_bundle: Path | None = typer.Option(None, "--ca-bundle", help="PEM bundle pip trusts (mounted read-only, never kept)."),
) -> None:
    """Build (or reuse) the target's engine base from its pinned lock, and its add-on locks over it; `builder image` does this itself."""
    from builder.constants import REPO_ROOT
    from builder.errors import ConfigError
    from builder.image.base import check_ca_bundle, ensure_lock_base, load_pinned_addons, load_pinned_lock

    check_ca_bundle(ca_bundle)
    cfg = config.load_target(target)
    t = cfg.target
    if t.base_source != "wheel-lock":
        raise ConfigError(f"target {t.name} uses base_source = {t.base_source}", hint="only wheel-lock bases are built here")
    pinned = config.require_pinned_base(cfg)
    lock = load_pinned_lock(path=REPO_ROOT / t.base_lock_path, digest=pinned.split("@", 1)[1])
    addons = load_pinned_addons(pins=t.addon_locks, engine=lock)
    built = ensure_lock_base(lock=lock, addons=addons, ca_bundle=ca_bundle, console=err_console)
    typer.echo(f"{built.tag} {built.id}")

# --- patches: engine wheel, patch series, kernel AOT fit check ---------------------------
patches_app = typer.Typer(help="Fetch the pinned engine and check / apply / refresh the patch series.", no_args_is_help=True)
app.add_typer(patches_app, name="patches")


def _print_series(report) -> None:
    from rich.table import Table

    table = Table(title=Text(f"patch series against {report.target}"))
    for column in ("patch", "file", "status", "upstream sha256", "detail"):
        table.add_column(column, overflow="fold")
    colours = {"applies cleanly": "green", "already applied": "cyan", "fails": "red"}
    for r in report.results:
        status = f"[{colours[r.status.value]}]{r.status.value}[/]"
        table.add_row(Text(r.patch), Text(r.path), status, "matches" if r.upstream_matches else "differs", Text(r.detail))
    out_console.print(table)


@patches_app.command("fetch-engine")
def patches_fetch_engine() -> None:
    """Download vllm==0.33.0 (x86_64 wheel), verify its sha256, unpack its Python sources into the cache."""
    from builder.patches.engine import fetch_engine

    tree = fetch_engine(log=lambda line: out_console.print(line, markup=False, highlight=False))
    out_console.print(f"engine sources: {tree.src_dir} (wheel sha256 {tree.wheel_sha256} verified)", markup=False)


@patches_app.command("check")
def patches_check(
    target: Path | None = typer.Option(None, "--target", help="engine tree or site-packages; default: the cached 0.33.0 sources"),
) -> None:
    """Dry-run the series in order; exit non-zero if any file fails."""
    from builder.patches.apply import check_engine

    check_engine(target=target, show=_print_series)


@patches_app.command("apply")
def patches_apply(
    to: Path = typer.Option(..., "--to", help="site-packages or unpacked engine holding vllm/"),
    manifest: Path | None = typer.Option(
        None, "--manifest", help="write the patched files and their byte-code, relative to DIR, one per line"
    ),
) -> None:
    """Check the series, apply it to DIR, byte-compile every patched file."""
    from builder.patches.apply import apply_series

    report = apply_series(target=to, patches_dir=PATCHES_DIR, show=_print_series)
    if manifest is not None:
        manifest.write_text("".join(f"{p}\n" for p in report.written_files(to)))
    out_console.print(f"applied {len(report.applied)} file sections, byte-compiled {len(report.compiled)} files")


@patches_app.command("refresh")
def patches_refresh(
    edited: Path = typer.Option(..., "--from", help="the edited engine tree"),
    add: list[str] = typer.Option([], "--add", help="PATCH:PATH, a file to add to a patch"),
) -> None:
    """Regenerate every diff of the series from an edited tree."""
    from builder.patches.refresh import refresh_series

    report = refresh_series(edited=edited, add=add)
    for path in report.written:
        out_console.print(f"rewrote {path}", markup=False, highlight=False)
    for path in report.unchanged:
        out_console.print(f"unchanged {path}", markup=False, highlight=False)


@patches_app.command("aot")
def patches_aot(
    engine: Path = typer.Option(..., "--engine", help="a PATCHED engine tree or site-packages"),
    arch: str = typer.Option(..., "--arch", help="sm_80, sm_90, sm_120 or sm_121"),
    json_out: Path | None = typer.Option(None, "--json", help="write the per-config report here"),
    jobs: int | None = typer.Option(None, "--jobs", min=1, help="configs compiled at once (default: one per usable CPU)"),
) -> None:
    """Compile the patched QSA kernel's production configs for ARCH; fail if one exceeds its shared memory."""
    from builder.patches.aot import compile_qsa_kernels

    from rich.table import Table

    report = compile_qsa_kernels(
        engine_root=engine, arch=arch, json_out=json_out, jobs=jobs,
        progress=lambda line: err_console.print(line, markup=False, highlight=False, soft_wrap=True),
    )  # fmt: skip
    table = Table(title=Text(f"QSA split-K kernel on {arch} (Triton {report.triton_version}, max shared {report.max_shared_bytes} B)"))
    for column in ("cache", "GQA", "BLOCK_N", "warps", "splits", "shared B", "regs", "local B"):
        table.add_column(column, justify="right")
    for c in report.configs:
        table.add_row(c.cache_dtype, f"{c.num_query_heads}/{c.num_kv_heads}", str(c.block_n), str(c.num_warps), str(c.num_splits), str(c.shared_bytes), str(c.registers), str(c.local_bytes))
    out_console.print(table)

# --- measure (benchmark, quality gates) ---

@app.command()
def bench(
    target: str = typer.Option(..., "--target", "-t", help="Target name (targets/<name>.toml) or path."),
    url: str | None = typer.Option(None, help="Server base URL; default http://127.0.0.1:<server.port>."),
    out: Path | None = typer.Option(None, help="Evidence directory; default evidence/<target>/."),
    prefill_lens: str | None = typer.Option(None, help="Comma-separated prompt lengths for the prefill sweep."),
    decode_output_len: int = typer.Option(512, help="Output tokens of the decode-heavy workload."),
    concurrency: str | None = typer.Option(None, help="Comma-separated levels of the concurrency sweep."),
    repeats: int = typer.Option(3, min=1, help="Requests per prefill/decode point."),
    workload: list[str] | None = typer.Option(
        None, help="Only these kinds: prefill, decode, concurrent2, concurrency (repeatable)."
    ),
    ab_url: str | None = typer.Option(None, help="Second endpoint: run an interleaved A/B instead."),
    ab_labels: str = typer.Option("A,B", help="Labels of the two A/B arms, e.g. auto,fp8."),
    ab_rounds: int = typer.Option(6, min=1, help="A/B rounds (each one request per arm)."),
    ab_input_len: int = typer.Option(2048, help="A/B prompt tokens."),
    ab_output_len: int = typer.Option(128, help="A/B output tokens."),
    ab_background: int = typer.Option(1, min=0, help="Background decode streams on the arm under test."),
) -> None:
    """Streaming benchmark (vllm bench serve metrics) or interleaved A/B; writes evidence JSON/MD/PNG."""
    from builder.measure.commands import BenchOptions, bench_command

    options = BenchOptions.parse(  # every option checked before a request is sent or a folder made
        url=url, out=out, prefill_lens=prefill_lens, decode_output_len=decode_output_len, concurrency=concurrency,
        repeats=repeats, workload=workload, ab_url=ab_url, ab_labels=ab_labels, ab_rounds=ab_rounds,
        ab_input_len=ab_input_len, ab_output_len=ab_output_len, ab_background=ab_background,
    )
    bench_command(target=target, options=options)


@app.command()
def gates(
    target: str = typer.Option(..., "--target", "-t", help="Target name (targets/<name>.toml) or path."),
    url: str | None = typer.Option(None, help="Server base URL; default http://127.0.0.1:<server.port>."),
    out: Path | None = typer.Option(None, help="Evidence directory; default evidence/<target>/."),
    only: list[str] | None = typer.Option(None, help="Run only these gates (repeatable)."),
    server_log: Path | None = typer.Option(
        None, help="Server startup log: KV pool size when /metrics lacks vllm:cache_config_info."
    ),
) -> None:
    """Quality gates; writes evidence/<target>/<gate>.json and exits non-zero when a required gate fails."""
    from builder.measure.commands import gates_command

    gates_command(target=target, url=url, out=out, only=only, server_log=server_log)


evidence_app = typer.Typer(help="The evidence ledger (evidence/claims.toml): every current claim and its files.", no_args_is_help=True)
app.add_typer(evidence_app, name="evidence")


@evidence_app.command("check")
def evidence_check() -> None:
    """Fail (exit 70) when a claim's file is missing, a quoted number differs from its file, a file
    under evidence/ belongs to no claim, or README's claims table is stale."""
    from builder.errors import EvidenceError
    from builder.evidence import check, load_ledger

    problems = check()
    if problems:
        raise EvidenceError(f"{len(problems)} problem(s):\n  " + "\n  ".join(problems),
                            hint="fix evidence/claims.toml or the files it names, then run it again")
    ledger = load_ledger()
    out_console.print(f"evidence: {len(ledger.claims)} claims hold over {len(ledger.files())} files", highlight=False)


@evidence_app.command("table")
def evidence_table(
    write: bool = typer.Option(False, "--write", help="Rewrite README.md's claims table in place instead of printing it."),
) -> None:
    """README's table of current claims, rendered from the ledger."""
    from builder.evidence import claims_table, load_ledger, write_readme_table

    if write:
        write_readme_table()
    else:
        typer.echo(claims_table(load_ledger()), nl=False)


@app.command("plan")
def plan_cmd(
    target: str = typer.Option(DEFAULT_TARGET, "--target", "-t", help="Target name (targets/<name>.toml) or a .toml path."),
    model_dir: Path | None = typer.Option(
        None, "--model-dir", help="Model snapshot: its config.json replaces the architecture file, its safetensors the weights estimate."
    ),
    kv_dtype: list[str] | None = typer.Option(
        None, "--kv-dtype", help="Plan only these KV dtypes (repeatable); default: every dtype the engine offers."
    ),
    kv_memory_gib: float | None = typer.Option(
        None, "--kv-memory-gib", min=0.0, help="Pin the KV budget per GPU (like vLLM's --kv-cache-memory-bytes)."
    ),
    prefix_caching: bool | None = typer.Option(
        None, "--prefix-caching/--no-prefix-caching", help="Override prefix caching (default: as the target launches)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON instead of tables."),
) -> None:
    """KV capacity per KV dtype: bytes per token per GPU, block layout, KV pool and sessions at max_model_len."""
    from builder import plan as plan_step

    cfg = config.load_target(target)
    result = plan_step.plan_target(
        cfg, model_dir=model_dir, kv_dtypes=kv_dtype or None, kv_memory_gib=kv_memory_gib, prefix_caching=prefix_caching,
    )
    if as_json:
        typer.echo(plan_step.plan_json(result), nl=False)
        return
    out_console.print(plan_step.plan_renderable(result))
    # A pinned KV budget is this layout's, not the one host's: compare only plans of the same basis.
    if kv_memory_gib is None and model_dir is None:
        hosts = plan_step.plan_against_single_host(cfg, result, kv_dtypes=kv_dtype or None, prefix_caching=prefix_caching)
        if hosts is not None:
            out_console.print(plan_step.hosts_table(hosts))


def main() -> None:
    import traceback

    from builder.redact import redact, redacted_output

    # Everything printed, by any command or library, goes out with the API key redacted: a
    # server's answer may echo the request's Authorization header.
    with redacted_output():
        try:
            app()
        except BuilderError as exc:
            # Messages quote user input (paths, names, server answers): printed as text, never as markup.
            message = redact(exc.message)  # before rich lays it out: a wrapped key is no longer found
            err_console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False, soft_wrap=True)
            if exc.hint:
                err_console.print(Text.assemble("  ", ("fix:", "bold"), " ", redact(exc.hint)), highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except Exception:  # a bug keeps its traceback, printed here (exit 1, as Python's own) so it is redacted too
            traceback.print_exc()
            sys.exit(1)


if __name__ == "__main__":
    main()
