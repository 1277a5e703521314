"""What a world's holders are, and who judges them: the reference, a team's change, a design.

A :class:`Variant` names a holder design and how its runs are judged. Its
``holder`` builds each holder instance as ``Holder(conn, config, new_id)``
does (a subclass of :class:`semaphore_core.Holder` is the usual one: the
same storage, rounds and replies, with the change a team is making), so a
variant runs every world, scenario and campaign the reference runs, with
every fault. Its judges are chosen explicitly, by ``model``:

- ``"literal"``: the literal model of the reference in lockstep
  (``exact_accounting``), beside every safety and liveness invariant. The
  default, for the reference and its opt-in fixes; a change the model
  does not share stops the run at its first difference, as it should.
- a model factory: the variant's own model, built as the literal model is
  (``LiteralHolder(conn, options, new_id)``; a subclass of
  :class:`semsim.check.literal_holder.LiteralHolder` with the same change),
  in lockstep the same way.
- ``None``: the safety and liveness invariants alone, with no model. What
  a design promises is judged; how it gets there is not.

Whichever it is, the verdict says so (:meth:`Variant.judges`). The
invariants read the holder's storage, so a variant keeps the reference's
tables and columns.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Final, Literal, TypeAlias

import attrs

from semaphore_core import Holder, HolderConfig

#: Builds one holder instance: ``(storage, config, new_id) -> Holder``, as ``Holder`` itself does.
HolderFactory: TypeAlias = Callable[[sqlite3.Connection, HolderConfig, Callable[[], str]], Holder]
#: Builds one model instance as ``LiteralHolder(conn, options, new_id)`` does (semsim.check.literal_holder).
ModelFactory: TypeAlias = Callable[[sqlite3.Connection, Any, Callable[[], str]], Any]

#: The judges every run has, whatever the variant: the invariants of docs/INVARIANTS.md.
INVARIANT_JUDGES: Final = ("safety", "liveness")


def _check_name(instance: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value or value != value.strip() or any(c.isspace() for c in value):
        raise ValueError(f"a variant's name is a non-empty string without spaces, got {value!r}")


def _check_holder(instance: object, attribute: Any, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"a variant's holder builds a Holder (a subclass of Holder, say), got {value!r}")


def _check_model(instance: object, attribute: Any, value: Any) -> None:
    if value is not None and value != "literal" and not callable(value):
        raise TypeError(
            f"a variant's model is 'literal', a model factory (a LiteralHolder subclass, say) or None "
            f"(the invariants alone), got {value!r}"
        )


@attrs.frozen
class Variant:
    """A holder design a world runs, and the judges of its runs (see the module docstring)."""

    #: How case files, traces and the command line name it: the reference is ``reference``.
    name: str = attrs.field(validator=_check_name)
    holder: HolderFactory = attrs.field(default=Holder, validator=_check_holder)
    model: Literal["literal"] | ModelFactory | None = attrs.field(default="literal", validator=_check_model)
    #: One line, for listings.
    description: str = ""

    def judges(self) -> tuple[str, ...]:
        """Who judges its runs, in words a verdict can print."""
        if self.model is None:
            return INVARIANT_JUDGES
        model = "the literal model" if self.model == "literal" else f"its own model ({_name_of(self.model)})"
        return (f"exact_accounting against {model}", *INVARIANT_JUDGES)

    def build(self, conn: sqlite3.Connection, config: HolderConfig, new_id: Callable[[], str]) -> Holder:
        """One holder instance; anything but a :class:`Holder` is refused, naming the variant."""
        holder = self.holder(conn, config, new_id)
        if not isinstance(holder, Holder):
            raise TypeError(
                f"variant {self.name!r} built a {type(holder).__name__}, not a semaphore_core.Holder"
            )
        return holder


def _name_of(factory: object) -> str:
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(factory)


#: The faithful port, judged by the literal model: what every run is unless told otherwise.
REFERENCE: Final = Variant("reference", description="the faithful port of seed 000's holder")
