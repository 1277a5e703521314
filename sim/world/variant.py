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

The client's queue has a model of its own, chosen by ``queue_model``:
``"literal"`` (the literal queue model in lockstep with every client's
queue, ``exact_queue``), a factory built as
``LiteralQueue(client_id, return_idle_leases)`` is (a subclass of
:class:`semsim.check.literal_queue.LiteralQueue` with a team's change to the
client), or ``None`` (no model of the queue). Unless given, it follows
``model``: the literal queue model beside a holder model, none with the
invariants alone. A team changing the client and not the holder sets
``queue_model=None`` (or its own) and keeps ``model="literal"``.

Two more fields make a variant of what is not a holder subclass:

- ``fixes``: opt-in fixes of :mod:`semaphore_core.fixes` every run of the
  variant has, whatever its config asks for (the config gains them, so the
  trace and the case file say so). semsim's ``every-fix`` and ``fix/NAME``
  variants are the reference with its fixes on.
- ``patch``: a change where a subclass cannot reach (the client's queue,
  the engine): a function returning a context manager, entered around each
  run in the process that runs it and left after, whatever happens. semsim's
  planted bugs (``mutant/NAME``, :mod:`semsim.world.mutant_catalog`) are
  variants of this kind. A patch rebinds what every world in the process
  sees, so a process runs one patched variant at a time, which is how
  worlds run.

The other two designs (:mod:`semsim.world.design`) have no holder; a
variant of one changes the part the seed gives in full:

- ``ledger``, for the gate: builds each gate instance's slot ledger as
  ``ConcurrencySlots(new_token, max_in_flight=..., stale_ms=...)`` does (a
  subclass of :class:`semaphore_core.gate.ConcurrencySlots`; ``slots()``
  keeps its meaning, as the judges read it);
- ``store``, for the leased worker: builds the store as
  ``LeaseStore(conn)`` does (a subclass of
  :class:`semaphore_core.leased.LeaseStore`, keeping its tables, as the
  judges read them).

Such a run is judged by its design's promises
(:mod:`semsim.check.design_promises`), whatever ``model`` says, and a
``patch`` applies to it as to any run. A variant that changes what the
design it runs does not have (a holder or holder fixes for the gate, a
ledger for the semaphore), or that names another ``design`` as the one it
is written for (a planted bug names the design whose code it patches), is
refused (:meth:`Variant.check_design`).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any, Final, Literal, TypeAlias

import attrs

from semaphore_core import Holder, HolderConfig
from semaphore_core.fixes import KNOWN_FIXES
from semaphore_core.gate import ConcurrencySlots
from semaphore_core.leased import LeaseStore

#: Builds one holder instance: ``(storage, config, new_id) -> Holder``, as ``Holder`` itself does.
HolderFactory: TypeAlias = Callable[[sqlite3.Connection, HolderConfig, Callable[[], str]], Holder]
#: Builds one model instance as ``LiteralHolder(conn, options, new_id)`` does (semsim.check.literal_holder).
ModelFactory: TypeAlias = Callable[[sqlite3.Connection, Any, Callable[[], str]], Any]

#: Builds one queue model as ``LiteralQueue(client_id, return_idle_leases)`` does (check.literal_queue).
QueueModelFactory: TypeAlias = Callable[[str, bool], Any]

#: Builds a gate's ledger as ``ConcurrencySlots(new_token, max_in_flight=, stale_ms=)`` does.
LedgerFactory: TypeAlias = Callable[..., ConcurrencySlots]
#: Builds the leased workers' store as ``LeaseStore(conn)`` does.
StoreFactory: TypeAlias = Callable[[sqlite3.Connection], LeaseStore]

#: Changes what every world in the process sees while it is entered (a variant's ``patch``).
Patch: TypeAlias = Callable[[], contextlib.AbstractContextManager[None]]

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


def _check_queue_model(instance: object, attribute: Any, value: Any) -> None:
    if value is not None and value != "literal" and not callable(value):
        raise TypeError(
            f"a variant's queue_model is 'literal', a queue model factory (a LiteralQueue subclass, "
            f"say) or None (no model of the client's queue), got {value!r}"
        )


def _as_fixes(value: Iterable[str]) -> frozenset[str]:
    if isinstance(value, str):  # "F1-fix" is one fix's name, not its letters
        raise TypeError(f"a variant's fixes are a set of fix names, got the string {value!r}")
    return frozenset(value)


def _check_fixes(instance: object, attribute: Any, value: Any) -> None:
    unknown = sorted(str(name) for name in value if name not in KNOWN_FIXES)
    if unknown:
        raise ValueError(
            f"a variant's fixes are names in semaphore_core.fixes.KNOWN_FIXES "
            f"({', '.join(sorted(KNOWN_FIXES))}), got {', '.join(unknown)}"
        )


def _check_factory(instance: object, attribute: Any, value: Any) -> None:
    if value is not None and not callable(value):
        what = "a ConcurrencySlots subclass" if attribute.name == "ledger" else "a LeaseStore subclass"
        raise TypeError(f"a variant's {attribute.name} builds one ({what}, say), or is None, got {value!r}")


def _check_patch(instance: object, attribute: Any, value: Any) -> None:
    if value is not None and not callable(value):
        raise TypeError(
            f"a variant's patch is a function returning a context manager, or None, got {value!r}"
        )


#: What a variant may change in each design (:meth:`Variant.check_design`).
_PARTS: Final[dict[str, tuple[str, ...]]] = {
    "semaphore": ("a holder", "holder fixes"),
    "gate": ("a ledger",),
    "leased-worker": ("a store",),
}


@attrs.frozen
class Variant:
    """A holder design a world runs, and the judges of its runs (see the module docstring)."""

    #: How case files, traces and the command line name it: the reference is ``reference``.
    name: str = attrs.field(validator=_check_name)
    holder: HolderFactory = attrs.field(default=Holder, validator=_check_holder)
    model: Literal["literal"] | ModelFactory | None = attrs.field(default="literal", validator=_check_model)
    #: One line, for listings.
    description: str = ""
    #: The model run beside every client's queue (``exact_queue``; see the module docstring).
    #: Unless given, the literal one when the holder has a model, none when it has not.
    queue_model: Literal["literal"] | QueueModelFactory | None = attrs.field(
        default=attrs.Factory(lambda self: None if self.model is None else "literal", takes_self=True),
        validator=_check_queue_model,
    )
    #: Opt-in fixes every run of the variant has (names in ``semaphore_core.fixes.KNOWN_FIXES``).
    fixes: frozenset[str] = attrs.field(default=frozenset(), converter=_as_fixes, validator=_check_fixes)
    #: Entered around each run, in the process that runs it (see the module docstring).
    patch: Patch | None = attrs.field(default=None, validator=_check_patch)
    #: The gate's ledger (None: seed 003's ``ConcurrencySlots``).
    ledger: LedgerFactory | None = attrs.field(default=None, validator=_check_factory)
    #: The leased workers' store (None: seed 004's ``LeaseStore`` as modelled).
    store: StoreFactory | None = attrs.field(default=None, validator=_check_factory)
    #: The one design the variant is written for (its ``patch`` changes that design's code), or
    #: None: any design that has the parts it changes.
    design: str | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.in_(_PARTS))
    )

    def check_design(self, design: str) -> None:
        """``ValueError`` if the variant changes a part ``design`` does not have: it would be ignored."""
        changed = {
            "a holder": self.holder is not Holder,
            "holder fixes": bool(self.fixes),
            "a ledger": self.ledger is not None,
            "a store": self.store is not None,
        }
        if self.design is not None and self.design != design:
            raise ValueError(
                f"variant {self.name!r} is written for the {self.design} design, not the {design} design "
                "(its patch would change nothing that runs)"
            )
        # A planted bug (mutant/NAME) names its design, so the check above refuses it elsewhere.
        foreign = [part for part, is_changed in changed.items() if is_changed and part not in _PARTS[design]]
        if foreign:
            raise ValueError(
                f"variant {self.name!r} changes {' and '.join(foreign)}, which the {design} design does "
                'not have (README, "Your own holder: variants")'
            )

    def build_ledger(
        self, new_token: Callable[[], str], *, max_in_flight: int, stale_ms: int
    ) -> ConcurrencySlots:
        """One gate instance's ledger; anything but a ``ConcurrencySlots`` is refused, naming the variant."""
        factory = ConcurrencySlots if self.ledger is None else self.ledger
        ledger = factory(new_token, max_in_flight=max_in_flight, stale_ms=stale_ms)
        if not isinstance(ledger, ConcurrencySlots):
            raise TypeError(
                f"variant {self.name!r} built a {type(ledger).__name__}, "
                "not a semaphore_core.gate.ConcurrencySlots"
            )
        return ledger

    def build_store(self, conn: sqlite3.Connection) -> LeaseStore:
        """The leased workers' store; anything but a ``LeaseStore`` is refused, naming the variant."""
        store = LeaseStore(conn) if self.store is None else self.store(conn)
        if not isinstance(store, LeaseStore):
            raise TypeError(
                f"variant {self.name!r} built a {type(store).__name__}, "
                "not a semaphore_core.leased.LeaseStore"
            )
        return store

    def judges(self) -> tuple[str, ...]:
        """Who judges its runs, in words a verdict can print."""
        judges: list[str] = []
        if self.model is not None:
            model = (
                "the literal model" if self.model == "literal" else f"its own model ({_name_of(self.model)})"
            )
            judges.append(f"exact_accounting against {model}")
        if self.queue_model is not None:
            queue = (
                "the literal queue model"
                if self.queue_model == "literal"
                else f"its own queue model ({_name_of(self.queue_model)})"
            )
            judges.append(f"exact_queue against {queue}")
        return (*judges, *INVARIANT_JUDGES)

    def applied(self) -> contextlib.AbstractContextManager[None]:
        """The variant's ``patch`` entered (nothing, for a variant without one)."""
        return contextlib.nullcontext() if self.patch is None else self.patch()

    def with_fixes(self, fixes: tuple[str, ...]) -> tuple[str, ...]:
        """``fixes`` and the variant's own, sorted: what a run of it has (``fixes`` as they are, for
        a variant without fixes of its own)."""
        return tuple(sorted(set(fixes) | self.fixes)) if self.fixes else fixes

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
