"""Seeds as the Rust planners take them: integers in 0..2**64."""

from __future__ import annotations

import operator

_SEEDS = 1 << 64


def as_seed(seed: object) -> int:
    """``seed`` as a planner's seed: any integer in -2**63..2**64 (numpy integers too), a negative one taken modulo
    2**64 as ``torch.Generator.manual_seed`` takes it, so ``-1`` and ``2**64 - 1`` give the same order. Anything
    else is refused when the object taking it is made, not in a DataLoader worker: ``TypeError`` for a non-integer,
    ``ValueError`` for one out of that range."""
    if isinstance(seed, bool):
        raise TypeError("seed must be an integer, not a bool")
    try:
        value = operator.index(seed)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"seed must be an integer, not {type(seed).__name__}") from None
    if not -(1 << 63) <= value < _SEEDS:
        raise ValueError(f"seed {value} is out of range: seeds are integers in -2**63..2**64")
    return value % _SEEDS
