"""Integer arguments checked in Python, so that a value out of range is a ``ValueError`` naming the argument rather
than the conversion's message ("out of range integral type conversion attempted") from the Rust call."""

from __future__ import annotations

import operator
from typing import Any

#: The largest count the Rust core takes (a 64-bit size).
MAX_COUNT = 2**63 - 1


def int_argument(name: str, value: Any, low: int, high: int = MAX_COUNT) -> int:
    """``int(value)`` within ``[low, high]`` (a whole float is taken, as ``int`` takes it); ``TypeError`` naming
    ``name`` if it is not a number, ``ValueError`` naming it if it is out of range."""
    try:
        if isinstance(value, float) and not value.is_integer():
            raise TypeError  # 2.7 is no count; int() would take it as 2
        number = operator.index(value) if not isinstance(value, float) else int(value)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name} must be an integer, not {value!r}") from None
    if number < low:
        raise ValueError(f"{name} = {number}: must be at least {low}")
    if number > high:
        raise ValueError(f"{name} = {number}: must be at most {high}")
    return number
