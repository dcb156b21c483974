"""The engine harness's own error. It derives from the product's base, so it carries a hint and the
harness CLI exits with its code as the builder's CLI does for its errors."""

from __future__ import annotations

from builder.errors import BuilderError


class EngineHarnessError(BuilderError):
    """The engine harness cannot build its payload (wheel, lock, tokenizer), check what landed, or find
    the environment it was pointed at."""

    exit_code = 23
