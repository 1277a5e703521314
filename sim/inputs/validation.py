"""Rules for the simulator's own settings, worded as ``semaphore_core.config`` words its own.

A world (``semsim.harness.run.WorldConfig``) and a fault plan (``semsim.world.faults``) come
from Python or from a case file a person may have edited. Each field is
checked by type and range when the object is built, with a message that
names the field ("duration_ms must be a positive integer, got 'ten'") in
the words the holder's configuration uses, so a case file's errors read
the same whether the holder or the simulator rejects them; a file's reader
prefixes the path (``config.workload.``). Whole-number floats count as
integers (``3.0``), as they do for the holder (JavaScript cannot tell them
apart); ``true`` is not a number.

Every bound here exists so that no input can make a run unbounded or
crash the model: a limit on every list, every duration and every count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

import attrs

from semaphore_core.numbers import MAX_SAFE_INTEGER, as_safe_int

T = TypeVar("T")

#: The longest virtual time any setting may name: a week.
MAX_TIME_MS: Final = 7 * 24 * 3_600_000
#: The longest name (a key, a group, an object) and the most entries in a list.
MAX_NAME_CHARS: Final = 200
MAX_LIST: Final = 10_000
#: The largest seed a run takes (seeds feed ``random.Random`` by string): the bound case files
#: and ``--seed`` state (docs/WIRE.md, "Case files").
MAX_SEED: Final = 2**63 - 1


def js_int(value: object) -> object:
    """Whole-number floats become ints (as the holder's configuration has it); the rest pass."""
    as_int = as_safe_int(value)
    return value if as_int is None else as_int


def check_int(name: str, value: object, low: int = 0, high: int = MAX_SAFE_INTEGER) -> None:
    """An integer in ``[low, high]``; ``low`` 1 reads "a positive integer", 0 "a non-negative" one."""
    kind = "a positive integer" if low == 1 else "a non-negative integer" if low == 0 else "an integer"
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        shown = kind if low in (0, 1) else f"{kind} of at least {low}"
        raise ValueError(f"{name} must be {shown}, got {value!r}")
    if value > high:
        raise ValueError(f"{name} must be at most {high}, got {value!r}")


def check_seed(value: object, name: str = "seed") -> None:
    """A run's seed: an ``int`` in ``[0, MAX_SEED]``.

    Unlike the settings above, ``1.0`` and ``True`` are not seeds: the seed names the run's random
    streams by its text, so each would give a run of its own, not seed 1's.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer in [0, {MAX_SEED}], got {value!r}")
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"{name} must be an integer in [0, {MAX_SEED}], got {value!r}")


def check_number(name: str, value: object, low: float, high: float) -> None:
    """A finite number in ``(low, high]``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not low < value <= high
    ):
        raise ValueError(f"{name} must be a number above {low:g} and at most {high:g}, got {value!r}")


def check_name(name: str, value: object) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME_CHARS:
        raise ValueError(
            f"{name} must be a non-empty string of at most {MAX_NAME_CHARS} characters, got {value!r}"
        )
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{name} must be Unicode text (no lone surrogates), got {value!r}") from None


def check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def check_choice(name: str, value: object, choices: Collection[str]) -> None:
    if value not in choices:
        listed = ", ".join(repr(choice) for choice in choices)
        raise ValueError(f"{name} must be one of {listed}, got {value!r}")


def check_list(name: str, value: object, most: int = MAX_LIST) -> None:
    if not isinstance(value, tuple | list):
        raise ValueError(f"{name} must be a list, got {value!r}")
    if len(value) > most:
        raise ValueError(f"{name} must hold at most {most} entries, got {len(value)}")


# --- as attrs validators ----------------------------------------------------------------------


if TYPE_CHECKING:
    Field: TypeAlias = attrs.Attribute[Any]
else:  # attrs.Attribute takes no subscript at run time, where the API reference reads annotations
    Field = attrs.Attribute
#: An attrs validator: ``(instance, field, value) -> None``, raising on a bad value.
Validator: TypeAlias = Callable[[Any, Field, Any], None]


def integer(low: int = 0, high: int = MAX_SAFE_INTEGER) -> Validator:
    return lambda _, attribute, value: check_int(attribute.name, value, low, high)


def time_ms(low: int = 0) -> Validator:
    """A virtual time or duration in milliseconds, at most a week."""
    return integer(low, MAX_TIME_MS)


def instance(cls: type, what: str | None = None) -> Validator:
    """The value is a ``cls``; if not, a one-line TypeError naming the field (and ``what`` it may be).

    (attrs' own ``instance_of`` puts its whole ``Attribute`` in the message.)
    """
    article = "an" if cls.__name__[:1] in "AEIOU" else "a"
    allowed = what or f"{article} {cls.__name__}"

    def check(_: Any, attribute: Field, value: Any) -> None:
        if not isinstance(value, cls):
            raise TypeError(f"{attribute.name} must be {allowed}, got {value!r}")

    return check


def list_as_tuple(value: Any) -> Any:
    """A list (a JSON array, or a caller's list) becomes a tuple; anything else is left for the check."""
    return tuple(value) if isinstance(value, list) else value


def optional(validator: Validator) -> Validator:
    def check(instance: Any, attribute: Field, value: Any) -> None:
        if value is not None:
            validator(instance, attribute, value)

    return check


def named(_: Any, attribute: Field, value: Any) -> None:
    check_name(attribute.name, value)


def boolean(_: Any, attribute: Field, value: Any) -> None:
    check_bool(attribute.name, value)


def one_of(*choices: str) -> Validator:
    return lambda _, attribute, value: check_choice(attribute.name, value, choices)
