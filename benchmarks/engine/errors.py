"""The engine harness's own error. It derives from the product's base, so it carries a hint and the
harness CLI exits with its code as the builder's CLI does for its errors."""

from __future__ import annotations

from builder.errors import BuilderError


class EngineHarnessError(BuilderError):
    """The device harness cannot assemble its carry (wheel, lock, tokenizer) or check what landed."""

    exit_code = 23
