"""Rules that keep a target file from subverting what is rendered from it: control characters
(bidirectional ones included) in any text, environment names the launch script owns, a base image
reference that only looks pinned, and a base lock outside the repository."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import PurePosixPath

from pydantic import BaseModel

from builder.config._base import rule_error
from builder.constants import LAUNCH_RESERVED_ENV

#: A POSIX shell variable name, matched whole (`$` alone would accept a trailing newline).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: name@sha256:<64 hex>; anything else after an '@' only looks pinned.
_DIGEST_SUFFIX = re.compile(r"@sha256:[0-9a-f]{64}\Z")
#: Unicode bidirectional controls (format characters, category Cf, so not caught as Cc): they make
#: the rendered text display in an order other than the one bash and the Hub read it in.
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_text(model: BaseModel, *, prefix: str = "") -> None:
    """Refuse control characters (NUL, newline, escape, bidi overrides, ...) in every string of the config.

    They end up in a bash script, ENV.md, a model card and docker labels: a NUL makes bash
    refuse the script, a newline starts a new line of code or markdown, ESC rewrites a terminal,
    and a bidi override (U+202E, ...) shows a reviewer text in another order than the one that runs.
    """
    for path, text in _strings(model, prefix):
        bad = next((c for c in text if _is_control(c)), None)
        if bad is None:
            continue
        kind = "bidirectional control character" if bad in BIDI_CONTROLS else "control character"
        raise rule_error(
            path,
            f"holds the {kind} {_name(bad)} at position {text.index(bad)}, which the rendered "
            "launch script, ENV.md and model card cannot carry",
            "remove it (use plain one-line text)",
        )


def check_extra_env(env: dict[str, str], *, field: str = "server.extra_env") -> None:
    for name in env:
        if not ENV_NAME.fullmatch(name):
            raise rule_error(
                f"{field}.{name!r}",
                "is not a valid shell variable name",
                "use letters, digits and _, not starting with a digit",
            )
        if name in LAUNCH_RESERVED_ENV:
            raise rule_error(
                f"{field}.{name}",
                "is read or set by the launch script itself (its caller's knobs, its inputs, or what the "
                "config sets through other fields), so setting it here could change what runs",
                "remove it; set the config field that controls it, or pass it when running the script",
            )


def check_base_image(ref: str, *, field: str = "target.base_image") -> None:
    if not ref or any(c.isspace() for c in ref):
        raise rule_error(field, f"{ref!r} is not an image reference", "use name:tag or name@sha256:<64 hex digits>")
    if ("@" in ref and not _DIGEST_SUFFIX.search(ref)) or ref.count("@") > 1:
        raise rule_error(
            field,
            f"{ref!r} has a malformed digest (after '@' must come sha256: and 64 lowercase hex digits)",
            "run `builder pin --target <target>` to write the digest, or fix it by hand",
        )
    if ref.startswith("@") or ref.split("@", 1)[0].endswith((":", "/")):
        raise rule_error(field, f"{ref!r} has no image name before its tag or digest", "use name:tag@sha256:<digest>")


def check_repo_path(path: str, *, field: str, example: str) -> None:
    """A path the config calls "in the repo" must stay in it: an absolute path or a '..' would
    build from a file the repository neither holds nor checksums."""
    if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
        raise rule_error(
            field,
            f"'{path}' points outside the repository (an absolute path or a '..' part), yet it must name a file of the repo",
            f"give the path relative to the repository root, e.g. {example}, and keep the file in the repo",
        )


def _strings(value: object, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _strings(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key, f"{path} (key {key!r})")
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")


def _is_control(c: str) -> bool:
    # Cc: C0, DEL and C1 controls; Zl/Zp: Unicode line and paragraph separators (a line break to many readers).
    return unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in BIDI_CONTROLS


def _name(c: str) -> str:
    return f"U+{ord(c):04X}" + (f" ({unicodedata.name(c)})" if unicodedata.name(c, "") else "")
