"""Campaigns across processes and machines: the serial campaign's results, computed in parallel.

What this module owns: spreading the runs of one :func:`~semsim.explore.fuzz.campaign`
over an executor (a local process pool, or a Dask cluster through
``distributed``'s ``concurrent.futures`` executor) so that the result is the
serial campaign's, field for field: same runs, same verdicts and counters,
same first failure, same shrunk case. It does not know about the command
line, the results database or progress lines: those are ``on_run``'s.

Theory of operation, in three steps:

1. **Draw.** The campaign's Hypothesis loop runs once with a stub runner that
   records each case and reports it passed. Hypothesis's generate phase draws
   the same sequence of cases whatever the test body does, as long as every
   example passes: the engine's choices come from its own ``Random`` (seeded
   by ``@seed``), the tree of choices already tried and the statuses of the
   examples (all ``VALID`` here). The body's time does not count: the
   deadline is off, and the health checks (which time draws) are all
   suppressed, so a slow body cannot change a status; ``target()`` and
   ``event()``, which would feed the body's results back into generation,
   are not used. The explicit examples come first, as they do serially.
   ``tests/test_campaigns.py`` checks the claim on several seeds.
2. **Run ahead.** Drawn cases go to the executor in chunks as they are drawn
   (a bounded window of chunks in flight), and each chunk comes back as its
   :class:`~semsim.explore.fuzz.RunReport`\\ s. Workers draw nothing: they run
   the cases they are sent (:func:`run_chunk`). Reports are taken in run
   order; ``on_run`` hears each one as it would serially. Once a report in
   order has failed, nothing after it is needed: dispatch stops, and chunks
   after it are cancelled. A failure seen out of order stops dispatch past
   it at once.
3. **Replay.** The real serial :func:`~semsim.explore.fuzz.campaign` runs again
   with a runner that answers from the reports of step 2: the k-th run of the
   campaign gets the k-th report if its case is equal to the one the report
   ran (otherwise, or past the reports, the run is done here, and counted as
   a miss). So up to and including the first failure it answers from the
   reports, then shrinks here, serially: shrinking is sequential, and it is
   the same code, so the shrunk case is the serial one. Because any case the
   reports do not answer is run here, a failing campaign's result cannot
   depend on the claim of step 1; the claim only decides how much work was
   done ahead. A campaign whose every run passed skips the replay: its
   result is the reports added in order, as the serial campaign adds them,
   and its cases are the serial ones by the claim (every example passed in
   both). The replay would cost a serial tail of 3-6 CPU ms a run, which no
   number of workers shortens (docs/BENCHMARKS.md, "Spreading a campaign").

A run is a deterministic function of its case (the simulator seeds Trio's
scheduler itself, for the run's duration, from the case's seed), so a report
made in another process equals the one this process would make. Trio's
scheduler state is process-wide, so :func:`run_chunk` runs one case at a time
per process even where an executor runs tasks in threads (a Dask worker with
several threads).

Local pools use the ``forkserver`` start method: ``fork`` copies a process
that already runs threads (the executor's own manager thread, a Dask
client's event loop) and holds Hypothesis's and Trio's module state, which
POSIX does not make safe; ``forkserver`` forks each worker from a clean
single-threaded server that has imported only this module (so a worker
starts in a fraction of ``spawn``'s time). Workers ignore SIGINT: Ctrl-C in a
terminal reaches the whole process group, and the coordinator decides what
an interrupt means (stop dispatching, report what came back in order).
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager, suppress
from typing import Final

import attrs
from hypothesis.database import ExampleDatabase

from semsim.explore.fuzz import (
    SHRINK_BUDGET_EVENTS,
    Campaign,
    RunReport,
    campaign,
    design_tolerated_for,
    run_case,
    tolerated_for,
)
from semsim.explore.strategies import Case
from semsim.world.design import DesignName

#: Runs sent to a worker at once. One: a run costs 0.1-0.5 CPU s and sending it about a
#: millisecond, and runs vary a hundredfold, so chunks of four made tails (one chunk of 15 s in
#: a 60 s campaign, measured) where single runs balance (docs/BENCHMARKS.md).
CHUNK_RUNS: Final = 1
#: Chunks in flight per worker (one running, one waiting): bounds the work done past a
#: failure or a stop.
CHUNKS_PER_WORKER: Final = 2
#: Chunks finished but not yet taken in order (behind a slow one), per worker, before dispatch
#: waits: bounds what the coordinator holds (a few hundred bytes a run) while keeping workers
#: busy behind a run that takes fifty times the others.
UNTAKEN_PER_WORKER: Final = 32
#: How often (seconds) the coordinator looks at ``stop()`` while it waits for workers.
POLL_S: Final = 0.1

#: One process runs one case at a time: Trio's scheduler RNG is process-wide (see above).
_ONE_RUN_AT_A_TIME = threading.Lock()


def run_chunk(cases: Sequence[Case], tolerated: frozenset[str]) -> tuple[bytes, float]:
    """What a worker does: run each case; return the reports (pickled, compressed) and the CPU seconds.

    The coordinator holds finished chunks until the campaign reaches them, so they
    come back compact (a few hundred bytes a run rather than tens of kilobytes of objects).
    """
    reports = []
    with _ONE_RUN_AT_A_TIME:
        started = time.process_time()
        for case in cases:
            reports.append(run_case(case, tolerated)[0])
        cpu_s = time.process_time() - started
    return zlib.compress(pickle.dumps(reports, protocol=pickle.HIGHEST_PROTOCOL), 1), cpu_s


def _reports(chunk: tuple[bytes, float]) -> list[RunReport]:
    reports = pickle.loads(zlib.decompress(chunk[0]))
    assert isinstance(reports, list), type(reports)
    return reports


@attrs.define
class Dispatch:
    """How the work was spread: what a caller may print, and what the tests check."""

    #: Runs sent to workers, and how many of those the campaign never needed (past a failure or stop).
    dispatched: int = 0
    #: Runs of the campaign (not of its shrink) the reports did not answer, run here instead.
    misses: int = 0
    #: Runs answered from the workers' reports.
    answered: int = 0
    #: CPU seconds the workers spent on the chunks the campaign used (for throughput figures).
    worker_cpu_s: float = 0.0


class _StopDrawing(BaseException):
    """Ends the draw: a failure is known before this point, or the user asked to stop."""


class _Ahead:
    """Steps 1 and 2: draw the plan, keep a window of chunks running, take reports in order."""

    def __init__(
        self,
        executor: Executor,
        workers: int,
        tolerated: frozenset[str],
        on_report: Callable[[RunReport], None],
        stop: Callable[[], bool],
        chunk_runs: int,
        dispatch: Dispatch,
    ) -> None:
        assert workers >= 1, workers
        assert chunk_runs >= 1, chunk_runs
        self.executor = executor
        #: Chunks running or waiting for a worker; and chunks sent but not yet taken in order
        #: (finished early, behind a slow one): both bound what the coordinator holds.
        self.in_flight_max = workers * CHUNKS_PER_WORKER
        self.untaken_max = workers * UNTAKEN_PER_WORKER
        self.tolerated = tolerated
        self.on_report = on_report
        self.stop = stop
        self.chunk_runs = chunk_runs
        self.dispatch = dispatch
        self.pending: list[Case] = []
        self.futures: list[Future[tuple[bytes, float]]] = []
        #: The cases of each chunk sent, and whether every report taken so far ran the case sent.
        self.sent: list[list[Case]] = []
        self.as_sent = True
        #: Chunks taken in order so far, and their reports (up to the first failure): the replay's answers.
        self.taken = 0
        self.reports: list[RunReport] = []
        #: The first chunk known to hold a failure: nothing after it is sent or taken.
        self.failed_chunk: int | None = None
        self.stopped = False

    @property
    def done(self) -> bool:
        """Nothing more is needed: a failure is known, or the user asked to stop."""
        return self.failed_chunk is not None or self.stopped

    # -- step 1: the stub runner -------------------------------------------------------------

    def draw(self, case: Case, tolerated: frozenset[str]) -> RunReport:
        assert tolerated == self.tolerated
        if not self.stopped and self.stop():
            self.stopped = True
        if self.done:
            raise _StopDrawing
        self.pending.append(case)
        if len(self.pending) == self.chunk_runs:
            self._send()
        return RunReport(case, "completed", None, None, "", 0, Counter(), Counter(), Counter())

    def _send(self) -> None:
        self._collect()
        while not self.done and (
            self._in_flight() >= self.in_flight_max or len(self.futures) - self.taken >= self.untaken_max
        ):
            self._wait_for_some()
        if self.done:
            self.pending.clear()
            raise _StopDrawing
        self._submit()

    def _submit(self) -> None:
        chunk, self.pending = self.pending, []
        self.sent.append(chunk)
        self.futures.append(self.executor.submit(run_chunk, chunk, self.tolerated))
        self.dispatch.dispatched += len(chunk)

    def _in_flight(self) -> int:
        return sum(1 for future in self.futures[self.taken :] if not future.done())

    # -- step 2: reports in order --------------------------------------------------------------

    def finish(self) -> None:
        """After the draw: send the last part-chunk, then take every report needed, in order."""
        if self.pending and not self.done:
            self._submit()
        while self.taken < len(self.futures) and not self.stopped:
            if self.failed_chunk is not None and self.taken > self.failed_chunk:
                break
            self._wait_for_some()
        self.cancel_all()

    def _wait_for_some(self) -> None:
        """Wait until a chunk finishes (or ``stop()``), then take what has come back in order."""
        waiting = [future for future in self.futures[self.taken :] if not future.done()]
        if waiting:
            wait(waiting, timeout=POLL_S, return_when=FIRST_COMPLETED)
        self._collect()

    def _collect(self) -> None:
        """Without waiting: note ``stop()``, a failure ahead, and take what has come back in order."""
        if self.stop():
            self.stopped = True
        self._note_failure_ahead()
        self._take_in_order()

    def _note_failure_ahead(self) -> None:
        """A finished chunk holding a failure: chunks after it are not needed, so are cancelled."""
        last = len(self.futures) if self.failed_chunk is None else self.failed_chunk
        for index in range(self.taken, last):
            future = self.futures[index]
            if future.done() and any(report.failed for report in _reports(future.result())):
                self._failed_at(index)
                return

    def _failed_at(self, index: int) -> None:
        self.failed_chunk = index
        for later in self.futures[index + 1 :]:
            later.cancel()

    def _take_in_order(self) -> None:
        while not self.stopped and self.taken < len(self.futures) and self.futures[self.taken].done():
            if self.failed_chunk is not None and self.taken > self.failed_chunk:
                return
            chunk = self.futures[self.taken].result()
            self.dispatch.worker_cpu_s += chunk[1]
            reports = _reports(chunk)
            self.as_sent &= [report.case for report in reports] == self.sent[self.taken]
            self.sent[self.taken] = []  # checked: the reports hold their cases from here on
            for report in reports:
                self.reports.append(report)
                if report.failed:
                    self._failed_at(self.taken)
                    break
                self.on_report(report)
            self.taken += 1

    def cancel_all(self) -> None:
        for future in self.futures:
            future.cancel()


class _Replay:
    """Step 3's runner: the k-th run of the campaign gets the k-th report, if it ran the same case."""

    def __init__(self, reports: list[RunReport], dispatch: Dispatch) -> None:
        self.reports = reports
        self.next = 0
        self.dispatch = dispatch
        self.in_prefix = True

    def __call__(self, case: Case, tolerated: frozenset[str]) -> RunReport:
        if self.in_prefix and self.next < len(self.reports) and self.reports[self.next].case == case:
            report = self.reports[self.next]
            self.next += 1
            self.dispatch.answered += 1
            if report.failed:
                self.in_prefix = False  # shrinking starts: from here on, everything runs here
            return report
        if self.in_prefix:
            self.dispatch.misses += 1
            self.in_prefix = False
        with _ONE_RUN_AT_A_TIME:  # an executor of threads may still be running a chunk here
            return run_case(case, tolerated)[0]

    def answering(self) -> bool:
        return self.in_prefix and self.next < len(self.reports)


def parallel_campaign(
    runs: int,
    seed: int,
    executor: Executor,
    workers: int,
    fixes: tuple[str, ...] = (),
    tolerated: frozenset[str] | None = None,
    on_run: Callable[[Campaign, RunReport, bool], None] | None = None,
    shrink: bool = True,
    shrink_budget_events: int = SHRINK_BUDGET_EVENTS,
    examples: Sequence[Case] = (),
    database: ExampleDatabase | None = None,
    stop: Callable[[], bool] | None = None,
    chunk_runs: int = CHUNK_RUNS,
    dispatch: Dispatch | None = None,
    variant: str = "reference",
    invariants: tuple[str, ...] = (),
    design: DesignName = "semaphore",
) -> Campaign:
    """:func:`~semsim.explore.fuzz.campaign` with its runs done ahead on ``executor``'s ``workers``.

    Same arguments, same result (see the module's docstring for why).
    ``on_run`` hears every run in run order, then every shrink run, as it
    would serially. ``stop()`` stops dispatching: the campaign then reports
    the runs that came back in order (``interrupted``), or, while shrinking,
    cuts the shrink short as it would serially. ``dispatch`` (if given) is
    filled in with how the work was spread.

    ``executor`` must run its tasks in other processes (:func:`local_pool`,
    :func:`dask_pool` with process workers): Hypothesis, drawing in this
    process, reseeds Trio's process-wide scheduler RNG between examples,
    which would disturb a run in one of this process's threads (measured: a
    thread pool's reports differ from the serial ones).
    """
    assert runs >= 1, runs
    assert workers >= 1, workers
    if design == "semaphore":
        allowed = tolerated_for(fixes) if tolerated is None else tolerated
    else:
        allowed = design_tolerated_for(design, fixes) if tolerated is None else tolerated
    asked = stop if stop is not None else (lambda: False)
    shown = Campaign(design=design)

    def report_in_order(report: RunReport) -> None:
        shown.add(report)
        if on_run is not None:
            on_run(shown, report, False)

    ahead = _Ahead(executor, workers, allowed, report_in_order, asked, chunk_runs, dispatch or Dispatch())
    try:
        with suppress(_StopDrawing):
            # Step 1 (and step 2 as chunks fill): draw the plan with a stub runner.
            campaign(
                runs,
                seed,
                fixes,
                tolerated=allowed,
                shrink=False,
                examples=examples,
                runner=ahead.draw,
                variant=variant,
                invariants=invariants,
                design=design,
            )
        ahead.finish()
    finally:
        ahead.cancel_all()
    found = bool(ahead.reports) and ahead.reports[-1].failed
    if ahead.stopped and not found:
        shown.interrupted = True
        return shown
    if not found and ahead.as_sent and database is None:
        # Every run passed, each report ran the case sent: the serial campaign draws those cases
        # (step 1's claim, with every example passing in both) and adds those reports in order,
        # which is what ``shown`` did. Its replay would only cost a serial tail (3-6 ms a run,
        # measured) that more workers cannot shorten. With a database, Hypothesis may read it.
        assert shown.runs == len(ahead.reports) == ahead.dispatch.dispatched, (shown.runs, ahead.dispatch)
        ahead.dispatch.answered = shown.runs
        return shown

    # Step 3: the serial campaign, answered from the reports up to its first failure.
    replay = _Replay(ahead.reports, ahead.dispatch)

    def on_replayed(result: Campaign, report: RunReport, shrinking: bool) -> None:
        if on_run is not None and (shrinking or result.runs > shown.runs):
            on_run(result, report, shrinking)

    return campaign(
        runs,
        seed,
        fixes,
        tolerated=allowed,
        on_run=on_replayed,
        shrink=shrink,
        shrink_budget_events=shrink_budget_events,
        examples=examples,
        database=database,
        # Stopping is for work still to do: the runs answered from reports cost nothing.
        stop=lambda: asked() and not replay.answering(),
        runner=replay,
        variant=variant,
        invariants=invariants,
        design=design,
    )


# --- executors ----------------------------------------------------------------------------------


def _ignore_interrupts() -> None:
    """A worker's start: Ctrl-C is the coordinator's to handle, and standard output is the
    coordinator's too (``--json`` prints one object there): what a worker prints goes to stderr."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdout = sys.stderr


def default_workers() -> int:
    """Every core this machine has (``--workers``' default)."""
    return max(1, os.cpu_count() or 1)


MANAGER_EXIT_TIMEOUT_S: Final = 30.0
"""How long ending a local pool waits for its manager thread once its workers are gone."""


@contextmanager
def local_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    """A pool of ``workers`` processes started by ``forkserver`` (see the module's docstring).

    On the way out (a finished campaign, a failure found, Ctrl-C, SIGTERM: see
    :func:`_sigterm_interrupts`) the workers are ended rather than waited for: whatever they
    still run is past what the campaign needs.
    """
    assert workers >= 1, workers
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    with _sigterm_interrupts():
        pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_ignore_interrupts)
        try:
            yield pool
        finally:
            _end(pool)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While a local pool lives, SIGTERM (a ``kill``, a job runner's timeout) stops the process
    as a second Ctrl-C does: a ``KeyboardInterrupt`` that unwinds through the pool's
    ``finally``, which ends its workers (``semsim fuzz`` then reports the runs back so far,
    as partial, with exit status 130). By default SIGTERM ends the coordinator alone, and a
    worker busy with a long run went on with it, orphaned, for as long as the run took (over
    an hour, once). ``SystemExit`` would not do: raised inside a run, Hypothesis wraps it as
    an error of the test. Outside the main thread, where no handler can be set, SIGTERM keeps
    its default."""

    def handle(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handle)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _end(pool: ProcessPoolExecutor) -> None:
    """End ``pool``'s workers now, and wait for its manager thread to see them gone.

    The wait matters at interpreter exit. ``concurrent.futures`` wakes every pool's manager
    thread from an exit hook, and on Python before 3.12 that wake-up can race the thread
    closing its wake-up pipe after its workers died: the hook then prints an ``OSError``
    traceback after a campaign that ended well (seen once in CI, after Ctrl-C with two
    workers). A manager thread that has finished has closed its pipe, so the hook skips it.
    """
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:  # pragma: no cover - newer Python
        terminate()
        return
    processes = dict(getattr(pool, "_processes", None) or {})
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes.values():
        if process.is_alive():
            process.terminate()
    for process in processes.values():
        process.join()
    if manager is not None:
        manager.join(MANAGER_EXIT_TIMEOUT_S)


class ClusterError(Exception):
    """The Dask scheduler cannot be used: not installed, unreachable, or a bad address."""


def check_address(address: str) -> None:
    """Fail now, before any ``Client`` is made, unless ``address`` reads as ``[scheme://]host:port``.

    The schemes are Dask's that take a host and port (``tcp``, ``tls``, ``ws``, ``wss``);
    ``tcp://`` is the default, as ``distributed`` has it.
    """
    from distributed.comm.addressing import get_address_host_port, parse_address

    expected = "expected a scheduler address such as tcp://host:8786"
    if not address.strip():
        raise ClusterError(f"--scheduler: needs an address; {expected}")
    try:
        scheme, _ = parse_address(address)
        host, port = get_address_host_port(address)
    except (ValueError, TypeError) as error:
        raise ClusterError(f"--scheduler {address!r}: {_first_line(error)}; {expected}") from None
    if scheme not in ("tcp", "tls", "ws", "wss"):
        raise ClusterError(f"--scheduler {address!r}: scheme {scheme!r} is not supported; {expected}")
    if not host:
        raise ClusterError(f"--scheduler {address!r}: no host; {expected}")
    if not 1 <= port <= 65535:
        raise ClusterError(f"--scheduler {address!r}: port {port} is not between 1 and 65535")


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


#: How long to wait for a Dask scheduler to answer before giving up (seconds).
CONNECT_TIMEOUT_S: Final = 10.0


@contextmanager
def dask_pool(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[tuple[Executor, int]]:
    """A Dask cluster's workers as an executor, and how many tasks it runs at once.

    ``distributed`` is the optional ``dask`` extra: without it, or when the
    scheduler does not answer within ``timeout_s``, :class:`ClusterError` says so.
    Every worker needs this semsim installed (tasks name :func:`run_chunk` by module).
    """
    try:
        from distributed import Client
    except ImportError:
        raise ClusterError(
            "--scheduler needs Dask's distributed package: pip install 'semsim[dask]'"
        ) from None
    check_address(address)
    failure = None
    try:
        client = Client(address, timeout=timeout_s, set_as_default=False)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as error:
        failure = f"cannot reach a Dask scheduler at {address!r} within {timeout_s:g} s: {_first_line(error)}"
    except (ValueError, TypeError) as error:  # e.g. tls:// without TLS settings
        failure = f"cannot use a Dask scheduler at {address!r}: {_first_line(error)}"
    if failure is not None:
        # A Client whose constructor failed half-way is held in a cycle by the error's traceback;
        # collected at exit, its close waits 20 s on a stopped event loop, then prints a traceback.
        # Collected now, while its loop still runs, it closes at once.
        gc.collect()
        raise ClusterError(failure)
    executor: Executor = client.get_executor(pure=False)  # type: ignore[no-untyped-call]
    try:
        info = client.scheduler_info()
        threads = sum(int(worker.get("nthreads", 1)) for worker in info.get("workers", {}).values())
        yield executor, max(1, threads)
    finally:
        executor.shutdown(wait=False)
        client.close()  # type: ignore[no-untyped-call]
