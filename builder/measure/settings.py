"""Typed inputs of the gates: a target's resolved thresholds and the per-model expectation file.

The expectation file says what a correct answer from one model looks like, so the same file
judges every KV dtype that model is served with.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from builder.config.models import Gates, ReleaseConfig
from builder.constants import EXPECTATIONS_DIR
from builder.errors import ConfigError


#: Needle length on long-context targets (the seed bundle's 128K), capped by the context.
NEEDLE_DEFAULT_TOKENS = 131072
#: Room the needle prompt leaves for the answer under max_model_len.
NEEDLE_CONTEXT_MARGIN = 256


class GateSettings(BaseModel):
    """The target's [gates] section with every default resolved against its config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gates: Gates
    expectations: str
    needle_tokens: int = Field(gt=0)
    prefix_tokens: int = Field(gt=0)
    kv_pool_floor_tokens: int = Field(gt=0)
    kv_pool_target_tokens: int = Field(gt=0)


def gate_settings(cfg: ReleaseConfig) -> GateSettings:
    """Resolve a config's gate settings. Unset KV pool bounds default to what the config itself
    promises: the floor is one full-context request, the target every sequence at full context."""
    g, kv, srv = cfg.gates, cfg.kv_cache, cfg.server
    expectations = g.expectations or cfg.model.served_name
    if not (EXPECTATIONS_DIR / f"{expectations}.toml").is_file():
        raise ConfigError(
            f"target {cfg.target.name}: no gate expectation file {expectations}.toml for model "
            f"{cfg.model.served_name}",
            hint=f"set gates.expectations to one of {sorted(p.stem for p in EXPECTATIONS_DIR.glob('*.toml'))} "
            f"or add builder/measure/expectations/{expectations}.toml",
        )
    floor = kv.pool_gate_floor_tokens or srv.max_model_len
    return GateSettings(
        gates=g,
        expectations=expectations,
        needle_tokens=g.needle_tokens or min(NEEDLE_DEFAULT_TOKENS, srv.max_model_len - NEEDLE_CONTEXT_MARGIN),
        prefix_tokens=g.prefix_tokens or min(2048, srv.max_model_len // 2),
        kv_pool_floor_tokens=floor,
        kv_pool_target_tokens=kv.pool_gate_target_tokens or max(floor, srv.max_model_len * (srv.max_num_seqs or 1)),
    )


class Probe(BaseModel):
    """One chat prompt at temperature 0 and the regex a correct answer matches."""

    model_config = ConfigDict(extra="forbid")

    name: str
    prompt: str
    expect: str = Field(description="Python regex searched in the answer")
    max_tokens: int = Field(48, gt=0)

    @field_validator("expect")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"expect is not a valid regex ({exc})") from exc
        return v


class BatteryBaseline(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="the evidence file the pass-set was copied from")
    passed: list[str]


class RecallTask(BaseModel):
    """A fact hidden in long filler and the question that recalls it; `{value}` is filled in."""

    model_config = ConfigDict(extra="forbid")

    fact: str
    question: str
    expect: str
    max_tokens: int = Field(32, gt=0)


class Expectations(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    golden: list[Probe] = Field(min_length=1)
    battery: list[Probe] = Field(min_length=1)
    battery_baseline: BatteryBaseline | None = None
    determinism_prompt: str
    needle: RecallTask
    prefix_cache: RecallTask

    @model_validator(mode="after")
    def _baseline_names(self) -> Expectations:
        if self.battery_baseline:
            unknown = set(self.battery_baseline.passed) - {p.name for p in self.battery}
            if unknown:
                raise ValueError(f"battery_baseline.passed names tasks not in battery: {sorted(unknown)}")
        return self


def load_expectations(name: str, *, directory: Path = EXPECTATIONS_DIR) -> Expectations:
    path = directory / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in directory.glob("*.toml"))
        raise ConfigError(f"gates.expectations = {name!r}: no file {path}", hint=f"use one of {known}")
    try:
        return Expectations.model_validate(tomllib.loads(path.read_text()))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ConfigError(f"{path} is invalid: {exc}", hint="fix the expectation file") from exc
