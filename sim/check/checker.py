"""A team's own invariant: a :class:`Checker` that hears a run's events and says when one broke.

semsim's invariants (docs/INVARIANTS.md) judge what the protocol promises;
a team building on it has promises of its own ("no grant is ever larger
than 4 permits", "group ``batch`` never holds more than half the limit").
A checker states one::

    from semsim.check.checker import Checker, Violated
    from semsim.check.events import Round

    class MaxGrant(Checker):
        name = "max_grant"
        description = "no grant is larger than 4 permits"

        def on_round(self, round: Round) -> None:
            for reply in round.replies:
                for grant in reply.grants:
                    if grant.permits > 4:
                        raise Violated(f"{grant.grant_id} grants {grant.permits} permits")

Every run builds a fresh instance (``MaxGrant()``), so a checker may keep
state across the events of its run and nothing leaks between runs. It
hears, synchronously and in the run's deterministic order:

- ``on_commit``: after every holder transaction (a round, a sync, the
  alarm's reclaim), with the holder's usage and a read-only view of its rows;
- ``on_admit`` and ``on_release``: a client starts or finishes an item on a
  permit;
- ``on_round``: a round's requests and its replies, in the same order;
- ``on_request``: a client sends a round's request, as it built it from its
  own queue at that moment;
- ``on_operation`` and ``on_api``: in the account-concurrency world, each
  lifecycle event of a client's durable operations, and each call that
  starts or ends at the external API;
- ``on_evict`` and ``on_instance``: a holder object is evicted (its
  instance and memory go, its storage stays), and an instance of it is
  about to be built from its storage (the first, and each after an
  eviction);
- ``on_finish``: once, after the faults stopped and the run settled
  (where a liveness promise is judged). A run that stops early, on another
  invariant, never finishes.

A run of the gate or the leased worker calls ``on_api`` and ``on_finish``
alone, and refuses a checker that hears more
(:mod:`semsim.check.design_checkers`).

A hook reports a broken promise by raising :class:`Violated` (or a plain
``assert``: its message is the detail). The run stops there with the
checker's ``name`` as the violated invariant, exactly as a built-in one
does: ``semsim fuzz`` shrinks it, writes the case and prints the replay
command. Any other exception is a bug in the checker, reported as the
``checker`` verdict naming it, never taken for the protocol's fault.

Hooks must only read: a checker that wrote to a holder's storage would
change the run it judges. They run after semsim's own checks of the same
event, so a built-in violation at the same step is reported first.

How a checker is handed to a run: ``run_world(..., checkers=[MaxGrant])``,
``semsim run/fuzz --invariant myservice.invariants:MaxGrant``, or the
``semsim.invariants`` entry-point group (:mod:`semsim.harness.invariants`).
"""

from __future__ import annotations

import ast
import functools
import linecache
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, Protocol

if TYPE_CHECKING:
    from semsim.check.events import (
        Admission,
        ApiCallChange,
        Commit,
        Evicted,
        Finish,
        InstanceBuilt,
        Operation,
        Release,
        Request,
        Round,
    )

#: The hooks a checker may define, in the order the docstring lists them.
HOOKS: Final = (
    "on_commit",
    "on_admit",
    "on_release",
    "on_round",
    "on_request",
    "on_operation",
    "on_api",
    "on_evict",
    "on_instance",
    "on_finish",
)
#: The verdict of a checker that failed for its own reasons (an exception other than a violation).
CHECKER_FAILED: Final = "checker"
#: At most this many checkers in one run (a limit on everything: each hears every event).
MAX_CHECKERS: Final = 64


class Fail(Protocol):
    """How semsim's own checkers report (the Monitor's ``fail``): a violation stops the run,
    unless the run tolerates the known finding that explains it, when it is recorded and the
    call returns (so a checker judging several things judges them all)."""

    def __call__(self, name: str, detail: str, finding: str | None = None, **state: Any) -> None: ...


class Note(Protocol):
    """How semsim's own checkers count what the reference documents and no run is failed for
    (the Monitor's ``document``): ``invariant`` names the rule it is an exception to, ``name``
    the documented behaviour (docs/INVARIANTS.md); a ``documented`` trace event says so."""

    def __call__(self, invariant: str, name: str, count: int = 1) -> None: ...


class Violated(Exception):
    """Raised by a checker's hook: its invariant broke; ``detail`` says how, in one line."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Checker:
    """One invariant of a team's own; see the module docstring. Subclass it and define hooks."""

    #: What reports, case files and ``--invariant`` listings call it: lowercase, no spaces,
    #: distinct from semsim's own invariants (``ceiling``, ``progress``, ...).
    name: ClassVar[str] = ""
    #: One line, for listings and the verdict.
    description: ClassVar[str] = ""
    #: ``safety`` (judged as the run goes) or ``liveness`` (judged once it settled): for reports.
    kind: ClassVar[Literal["safety", "liveness"]] = "safety"

    def on_commit(self, commit: Commit) -> None:
        """After every holder transaction."""

    def on_admit(self, admission: Admission) -> None:
        """A client admitted an item on a permit."""

    def on_release(self, release: Release) -> None:
        """A client released an item's permit."""

    def on_round(self, round: Round) -> None:
        """A round's requests and replies, in the same order."""

    def on_request(self, request: Request) -> None:
        """A client sends a round's request."""

    def on_operation(self, operation: Operation) -> None:
        """A lifecycle event of a client's durable operation (account-concurrency worlds)."""

    def on_api(self, call: ApiCallChange) -> None:
        """A call started or ended at the external API (account-concurrency worlds)."""

    def on_evict(self, evicted: Evicted) -> None:
        """A holder object was evicted: its instance and memory go, its storage stays."""

    def on_instance(self, built: InstanceBuilt) -> None:
        """An instance of a holder object is being built from its storage (the first, or a rebuilt
        one), before its constructor runs."""

    def on_finish(self, finish: Finish) -> None:
        """The run settled after its faults stopped: judge what must have come about."""


def assertion_detail(error: AssertionError) -> str:
    """What a failed ``assert`` in a hook says, the same whether pytest rewrote it or not.

    A verdict must not depend on the process it was reached in: pytest
    rewrites the asserts of the modules it imports (a checker in a test
    suite) and appends its explanation to the message, while a campaign's
    worker processes import the same module unrewritten. So the detail is
    the message's first line (which rewriting leaves alone), or, for an
    ``assert`` without a message, the asserted expression as written.
    """
    message = str(error).split("\n", 1)[0]
    frames = traceback.extract_tb(error.__traceback__)
    statement = _assert_statement(frames[-1]) if frames else None
    if statement is not None and statement.msg is None:
        return f"assert {ast.unparse(statement.test)}"
    return message or "an assertion failed"


def _assert_statement(frame: traceback.FrameSummary) -> ast.Assert | None:
    """The ``assert`` statement ``frame`` stopped in, from its file's source, or None if unreadable.

    Found by line range, innermost first: CPython names the line of a
    multi-line assert's condition, pytest's rewritten code the line the
    statement starts on, and both lie within the same statement.
    """
    if frame.lineno is None:
        return None
    return next(
        (node for first, last, node in _asserts(frame.filename) if first <= frame.lineno <= last),
        None,
    )


@functools.lru_cache(maxsize=64)
def _asserts(filename: str) -> tuple[tuple[int, int, ast.Assert], ...]:
    """Every ``assert`` of a source file with its line range, innermost (latest start) first."""
    source = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    found = [
        (node.lineno, node.end_lineno or node.lineno, node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
    ]
    return tuple(sorted(found, key=lambda entry: -entry[0]))


def hears(checker: Checker, hook: str) -> bool:
    """Whether ``checker`` defines ``hook`` (one that does not is never called for it)."""
    return getattr(type(checker), hook) is not getattr(Checker, hook)


def check_checkers(checkers: Iterable[object], reserved: Iterable[str]) -> tuple[type[Checker], ...]:
    """``checkers`` as a tuple, each a :class:`Checker` subclass with a valid name of its own.

    ``reserved``: the names semsim's own invariants use. Raises ``TypeError`` or
    ``ValueError`` naming the checker and what is wrong.
    """
    if isinstance(checkers, str | bytes) or not isinstance(checkers, Iterable):
        raise TypeError(f"checkers must be a list of Checker subclasses, got {checkers!r}")
    found = tuple(checkers)
    if len(found) > MAX_CHECKERS:
        raise ValueError(f"at most {MAX_CHECKERS} checkers judge one run, got {len(found)}")
    taken = set(reserved) | {CHECKER_FAILED}
    names: dict[str, type[Checker]] = {}
    for checker in found:
        if not (isinstance(checker, type) and issubclass(checker, Checker)) or checker is Checker:
            raise TypeError(
                f"a checker is a subclass of semsim.check.checker.Checker (its class: each run builds "
                f"its own instance), got {checker!r}"
            )
        problem = name_problem(checker.name)
        if problem:
            raise ValueError(f"checker {checker.__qualname__}: {problem}")
        if checker.name in taken:
            raise ValueError(
                f"checker {checker.__qualname__}: {checker.name!r} is the name of one of semsim's own "
                f"invariants; give yours a name of its own"
            )
        if checker.kind not in ("safety", "liveness"):
            raise ValueError(
                f"checker {checker.__qualname__}: kind is 'safety' or 'liveness', got {checker.kind!r}"
            )
        try:
            checker()  # every run builds its own: a class that needs arguments is refused here
        except Exception as error:
            raise TypeError(
                f"checker {checker.__qualname__} cannot be built without arguments (each run builds "
                f"its own instance): {type(error).__name__}: {error}"
            ) from None
        other = names.setdefault(checker.name, checker)
        if other is not checker:
            raise ValueError(
                f"checkers {other.__qualname__} and {checker.__qualname__} are both named {checker.name!r}"
            )
    return tuple(names.values())


def name_problem(name: object) -> str | None:
    """What is wrong with an invariant's name, or None (reports and case files print it bare)."""
    if not isinstance(name, str) or not name:
        return f"its name (the class attribute name) must be a non-empty string, got {name!r}"
    if not name.isascii() or not all(c.isalnum() or c in "_-." for c in name):
        return f"its name is letters, digits, '_', '-' and '.', got {name!r}"
    return None
