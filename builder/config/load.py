"""Loading target files: a name or a path in, a validated ReleaseConfig or a ConfigError out."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

from pydantic import ValidationError

from builder.config._base import rule_error
from builder.config.models import ReleaseConfig
from builder.constants import TARGETS_DIR
from builder.errors import ConfigError, ImagePinError


def available_targets(targets_dir: Path = TARGETS_DIR) -> list[str]:
    return sorted(p.stem for p in targets_dir.glob("*.toml"))


def target_path(name_or_path: str | Path, *, targets_dir: Path = TARGETS_DIR) -> Path:
    """A path is taken as is; a bare name means targets/<name>.toml."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.parent != Path("."):
        return p
    return targets_dir / f"{p}.toml"


def load_target(name_or_path: str | Path, *, targets_dir: Path = TARGETS_DIR) -> ReleaseConfig:
    path = target_path(name_or_path, targets_dir=targets_dir)
    if not path.is_file():
        raise ConfigError(
            f"target '{name_or_path}' not found ({path})",
            hint=f"use one of: {', '.join(available_targets(targets_dir)) or '(none)'}, or pass a .toml path",
        )
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}); TOML files are UTF-8",
            hint="save the file as UTF-8",
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", hint="fix the syntax at the line named") from exc
    except RecursionError:
        raise ConfigError(
            f"{path}: arrays or tables nest too deeply to parse; no target file nests more than a few levels",
            hint="flatten the nesting (a target file is a few flat tables)",
        ) from None
    return parse_config(data, source=str(path))


def parse_config(data: dict, *, source: str) -> ReleaseConfig:
    try:
        return ReleaseConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: invalid config\n{format_validation_error(exc)}") from exc


def format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (typo?); remove it or check the spelling against `builder schema`"
        lines.append(f"  - {loc + ': ' if loc else ''}{msg}")
    return "\n".join(lines)


def require_pinned_base(cfg: ReleaseConfig) -> str:
    """The pinned base of the target's base_source, ``ref@sha256:<digest>``; anything unpinned is refused.

    For base_source = image: the image reference with its registry digest. For wheel-lock: the lock's
    path with the digest of its bytes (the lock file itself is checked against it when a build reads it).
    Builds and serves must be reproducible, so a tag or a bare path never passes.
    """
    t = cfg.target
    if t.base_source == "wheel-lock":
        if t.base_lock_digest is None:
            raise ImagePinError(
                str(rule_error(
                    "target.base_lock",
                    f"'{t.base_lock}' of target '{t.name}' has no @sha256: digest, so any edit of the lock would be built",
                    f"run `builder pin --target {t.name}` to write the lock file's digest (or edit base_lock to "
                    "path@sha256:<sha256sum of the file>)",
                ))
            )
        return str(t.base_lock)
    if t.base_image_digest is None:
        hint = None
        if _machine_local(t.base_image):
            # Its digest exists only on this machine: pin a copy, never the tracked target file.
            fix = (f"this base is built on this machine, so its digest is machine-local: `make image TARGET={t.name}` "
                   f"builds it and pins a copy, .cache/targets/{t.name}.toml (targets/{t.name}.toml stays as it is); "
                   f"then `make serve TARGET={t.name}`, or pass --target .cache/targets/{t.name}.toml")
        else:
            fix = (f"pull the image, then run `builder pin --target {t.name}` to write its digest into the target file "
                   "(or edit base_image to name@sha256:<digest>)")
            if cfg.engine.resolved.wheel_lock:
                hint = (f"no registry reachable? set base_source = \"wheel-lock\" and base_lock = \"docker/locks/"
                        f"{cfg.engine.resolved.package}-{cfg.engine.resolved.version}-linux-{t.arch}.txt\", "
                        f"then `builder pin --target {t.name}`")
        raise ImagePinError(
            str(rule_error("target.base_image", f"'{t.base_image}' of target '{t.name}' has no @sha256: digest", fix)),
            hint=hint,
        )
    return t.base_image


def _machine_local(ref: str) -> bool:
    """A base in a registry on this host (scripts/local-registry.sh): its digest means nothing elsewhere."""
    host = ref.split("/", 1)[0] if "/" in ref else ""
    return host.split(":", 1)[0] in ("127.0.0.1", "localhost")


def config_digest(cfg: ReleaseConfig) -> str:
    """A stable digest of the resolved config, recorded with evidence so results name what they measured."""
    blob = json.dumps(cfg.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


def json_schema() -> dict:
    return ReleaseConfig.model_json_schema()
