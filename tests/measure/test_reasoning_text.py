"""With a reasoning parser (the release's qwen3), vLLM 0.33 puts generated text in `reasoning`
and content can be empty; the determinism and prefix-cache identity checks must compare the whole
generation, or two empty contents would pass however different the runs were."""

from __future__ import annotations

import asyncio

from builder.measure import gates
from builder.measure import client as bench


def chat_answer(content: str | None, reasoning: str | None = None, key: str = "reasoning") -> dict:
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message[key] = reasoning
    return {"choices": [{"message": message}]}


def test_full_text_includes_reasoning_under_either_name():
    assert bench.response_full_text(chat_answer("Paris", "thinking")) == "thinkingParis"
    assert bench.response_full_text(chat_answer(None, "old", key="reasoning_content")) == "old"
    assert bench.response_full_text({"choices": [{"text": "completion"}]}) == "completion"
    assert bench.response_text(chat_answer(None, "thinking")) == ""  # content alone, for recall checks


def test_streamed_deltas_count_reasoning():
    assert bench._choice_text({"delta": {"reasoning": "a", "content": "b"}}) == "ab"
    assert bench._choice_text({"delta": {"reasoning_content": "a"}}) == "a"


class _Ctx:
    """The gate's view of a server whose answers differ only in reasoning."""

    def __init__(self, answers: list[dict]) -> None:
        self.answers = iter(answers)
        self.settings = type("S", (), {"gates": type("G", (), {"determinism_runs": 2, "determinism_max_unique": 1})()})()
        self.expectations = type("E", (), {"determinism_prompt": "p"})()

    async def chat(self, label, prompt, max_tokens):
        answer = next(self.answers)
        return bench.response_text(answer), {"label": label, "request": {}, "response": answer}


def test_determinism_fails_when_only_the_reasoning_differs():
    ctx = _Ctx([chat_answer(None, "one way"), chat_answer(None, "another way")])
    outcome = asyncio.run(gates.gate_determinism(ctx))
    assert outcome.verdict == "fail" and outcome.observed["unique"] == 2


def test_determinism_passes_identical_generations():
    ctx = _Ctx([chat_answer("x", "same"), chat_answer("x", "same")])
    assert asyncio.run(gates.gate_determinism(ctx)).verdict == "pass"
