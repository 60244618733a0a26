"""The base of agent-file sections (``agent_file``, ``agent_flow``): strict tables whose
numeric keys each have an allowed range."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from brisvox.server.providers import Bounds

__all__ = ["Section", "in_bounds", "range_text"]


def _number(x: float) -> str:
    """A bound as a person writes it (``30``, ``0.35``, ``1000000``), never ``1e+06``."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def range_text(bounds: Bounds) -> str:
    low, high = bounds
    if low is not None and high is not None:
        return f"expected a value from {_number(low)} to {_number(high)}"
    if low is not None:
        return f"expected at least {_number(low)}"
    return f"expected at most {_number(high)}" if high is not None else "expected a number"


def in_bounds(value: float, bounds: Bounds) -> bool:
    """``value`` is finite and within ``bounds`` (inf and nan never are)."""
    low, high = bounds
    return math.isfinite(value) and (low is None or value >= low) and (high is None or value <= high)


class Section(BaseModel):
    """A table of the file.  Every numeric key has an allowed range in its class's ``ranges``
    (lowest, highest, both allowed): a value outside it, or not finite (``inf``, ``nan``), is
    reported with the range.  A section that declares a numeric field without a range is a
    programming error, caught when the class is defined."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    ranges: ClassVar[Mapping[str, tuple[float, float]]] = MappingProxyType({})

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for name, info in cls.model_fields.items():
            kinds = {info.annotation, *get_args(info.annotation)}
            if kinds & {int, float} and name not in cls.ranges:
                raise TypeError(f"{cls.__name__}.{name} is a number without an allowed range in ranges")

    @field_validator("*", mode="after")
    @classmethod
    def _within_range(cls, value: Any, info: ValidationInfo) -> Any:
        bounds = cls.ranges.get(info.field_name or "")
        if bounds is None or isinstance(value, bool) or not isinstance(value, int | float):
            return value
        if not in_bounds(value, bounds):
            raise PydanticCustomError("out_of_range", range_text(bounds))
        return value
