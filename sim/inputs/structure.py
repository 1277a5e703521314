"""JSON (a case file's ``config`` and ``faults``) into the attrs classes it describes, by cattrs.

The attrs classes are the one place a setting's type and range live: each
field's converter and validator (:mod:`semsim.inputs.validation`) check it
when the object is built, from Python or from a file alike. cattrs walks
the JSON by the classes' own annotations (nested classes, lists of entries,
optional parts), so no reader restates them. What it is told here, and why:

- numbers, strings, booleans and ``Literal`` choices pass through as they
  are, for the fields' own checks to judge: cattrs' ``int("3")`` would
  accept what a case file must not, and ``int(3.5)`` would truncate it;
- a tuple comes from a JSON array only, of at most
  :data:`~semsim.inputs.validation.MAX_LIST` entries (cattrs takes any
  iterable, so a string would become its letters);
- a class comes from a JSON object only, with no field it lacks.

Errors keep the paths the readers have always printed
(``config.holder.limit must be a positive integer, got 'ten'``,
``faults.drops[0]: unknown field 'x'``): cattrs records where each failure
happened, and :func:`structure` words the first as one line under ``where``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, Final, TypeVar

import attrs
import cattrs
from cattrs.errors import (
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn

from semsim.inputs.validation import MAX_LIST

T = TypeVar("T")
#: What JSON holds as it is, and a field's own converter and validator judge.
_SCALARS: Final = (int, float, str, bool)


class _Shape(ValueError):
    """A value of the wrong JSON kind, worded after its path (``config.holder must be ...``)."""


def _passthrough(value: Any, _: Any) -> Any:
    return value


def _is_literal(kind: Any) -> bool:
    return typing.get_origin(kind) is typing.Literal


def _is_scalar_union(kind: Any) -> bool:
    """``int | float``, ``str | None`` and the like: left to the field's checks as a scalar is."""
    if typing.get_origin(kind) not in (typing.Union, types.UnionType):
        return False
    return all(arg in _SCALARS or arg is type(None) or _is_literal(arg) for arg in typing.get_args(kind))


def _is_tuple(kind: Any) -> bool:
    return kind is tuple or typing.get_origin(kind) is tuple


def _tuple(value: Any, kind: Any) -> tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise _Shape(f"must be a JSON array, got {type(value).__name__}")
    if len(value) > MAX_LIST:
        raise _Shape(f"must hold at most {MAX_LIST} entries, got {len(value)}")
    args = typing.get_args(kind)
    if not (len(args) == 2 and args[1] is Ellipsis):
        return tuple(value)  # a fixed-size tuple: its field's converter checks the size
    entries = []
    for index, entry in enumerate(value):
        try:
            entries.append(_CONVERTER.structure(entry, args[0]))
        except Exception as error:  # noted with its index, as cattrs notes its own lists' entries
            error.add_note(IterableValidationNote(f"Structuring {kind} @ index {index}", index, args[0]))
            raise IterableValidationError(f"While structuring {kind}", [error], kind) from None
    return tuple(entries)


def _class_hook(cls: type) -> Callable[[Any, Any], Any]:
    generated: Callable[[Any, Any], Any] = make_dict_structure_fn(
        cls, _CONVERTER, _cattrs_forbid_extra_keys=True
    )

    def structure_object(value: Any, kind: Any) -> Any:
        if not isinstance(value, dict):
            raise _Shape(f"must be a JSON object, got {type(value).__name__}")
        return generated(value, kind)

    return structure_object


_CONVERTER: Final = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
for _scalar in _SCALARS:
    _CONVERTER.register_structure_hook(_scalar, _passthrough)
_CONVERTER.register_structure_hook_func(_is_literal, _passthrough)
_CONVERTER.register_structure_hook_func(_is_scalar_union, _passthrough)
_CONVERTER.register_structure_hook_func(_is_tuple, _tuple)
_CONVERTER.register_structure_hook_factory(attrs.has, _class_hook)


def structure(data: Any, cls: type[T], where: str) -> T:
    """``data`` as a ``cls``; a ValueError naming the first wrong field under ``where``."""
    try:
        return _CONVERTER.structure(data, cls)
    except (ClassValidationError, IterableValidationError, _Shape, TypeError, ValueError, KeyError) as error:
        raise ValueError(_first_problem(error, where)) from None


def _first_problem(error: BaseException, path: str) -> str:
    """The first failure under ``error``, as one line: ``path`` is where ``error`` was raised."""
    if isinstance(error, ClassValidationError | IterableValidationError):
        # An unknown field first: a misspelt one is also "missing" under its right name.
        inner = sorted(error.exceptions, key=lambda e: not isinstance(e, ForbiddenExtraKeysError))[0]
        return _first_problem(inner, path + _step(inner))
    if isinstance(error, ForbiddenExtraKeysError):
        return f"{path}: unknown field {sorted(error.extra_fields)[0]!r}"
    if isinstance(error, KeyError):  # noted at the field it is missing from: its object's path
        return f"{path.rsplit('.', 1)[0]}: missing field {error.args[0]!r}"
    if isinstance(error, _Shape):
        return f"{path} {error}"
    message = str(error)
    if message.startswith(("config.", "faults.")):
        return message  # a nested value already named its full path
    # A field's own check, raised as its object was built: it names the field after the object.
    return f"{path}.{message}"


def _step(error: BaseException) -> str:
    """Where cattrs noted ``error`` happened, as a path step: ``.name`` or ``[index]``."""
    for note in getattr(error, "__notes__", ()):
        name = getattr(note, "name", None)
        if name is not None:
            return f".{name}"
        index = getattr(note, "index", None)
        if index is not None:
            return f"[{index}]"
    return ""
