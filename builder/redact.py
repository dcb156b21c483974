"""The server's API key never reaches a log or a written file: the one rule, for every stage.

`redact` replaces the key in VLLM_API_KEY (and any other secret given), however a JSON string or
a repr spells it, and every `Bearer <token>`, with REDACTED. `redact_data` applies it to each
string of a JSON-like value, `redacted_output` to everything printed while a block runs.

The rule itself lives in builder.measure.client: that file ships alone in every bundle as
benchmark_vllm.py and imports nothing of the builder, so the script users run must hold it. This
module is where the builder's stages take it from; the client imports nothing of the builder, so
the import below cannot pull a later stage's code into an earlier one.
"""

from __future__ import annotations

from builder.measure.client import (
    REDACTED,
    RedactingStream,
    redact,
    redact_data,
    redacted_output,
)

__all__ = ["REDACTED", "RedactingStream", "redact", "redact_data", "redacted_output"]
