"""Reading users' files and checking where output goes, before any work starts.

Every file semsim reads (a case, a traffic recording, a trace) and every
file it writes (a trace, a plot, a table, a campaign's cases) goes through
here, so the rules are the same everywhere:

- An input must be a regular file no larger than its bound. The bound is
  enforced by how much is read, not by ``st_size`` alone: a device, a pipe
  or ``/proc`` file reports size 0 and would otherwise be read without end
  (``semsim replay /dev/zero`` once grew to 13 GB). Non-regular files are
  refused before a byte is read.
- An output path is checked before the run it would record: its directory
  exists and accepts a new file, it is not a directory, and a plot's
  extension is one matplotlib can write. Nothing is left behind by the
  check itself.
- An output is written whole or not at all (:func:`write_whole`): a full
  disk, a crash or Ctrl-C part-way leaves the file as it was, or absent,
  never truncated.

Errors are :class:`InputError` (a ``ValueError``) with a one-line message
naming the path; the command line turns them into exit status 2.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, NoReturn

#: Bytes read at a time; a file is read until it ends or passes its bound.
_CHUNK_BYTES: Final = 1 << 20


class InputError(ValueError):
    """A file semsim was asked to read or write cannot be used; the message names it."""


#: The path that means standard input (a file read) or standard output (a file written).
STDIO: Final = "-"


def is_stdio(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is ``-``: standard input or output rather than a file."""
    return os.fspath(path) == STDIO


def read_from(path: str | os.PathLike[str]) -> str:
    """Where a file came from, for a message: its path, or "standard input" for ``-``."""
    return "standard input" if is_stdio(path) else os.fspath(path)


def written_to(path: str | os.PathLike[str]) -> str:
    """Where a file went, for a message: its path, or "standard output" for ``-``."""
    return "standard output" if is_stdio(path) else os.fspath(path)


#: Standard input, once read: a command may read its input file more than once (a case file's
#: fields), and standard input can be read only once.
_stdin: bytes | None = None
#: Where a file written to ``-`` goes while :func:`stdout_for_data` holds (the real standard output).
_data_out: BinaryIO | None = None


def _read_stdin(max_bytes: int, what: str) -> bytes:
    global _stdin
    if _stdin is None:
        if sys.stdin is None:
            raise InputError(f"standard input is closed; {what} was to be read from it (-)")
        _stdin = sys.stdin.buffer.read(max_bytes + 1)
    if len(_stdin) > max_bytes:
        raise InputError(f"standard input: larger than the {max_bytes:,} bytes {what} may hold")
    return _stdin


def forget_stdin() -> None:
    """A new command reads standard input afresh (``semsim.cli.main`` calls it per command)."""
    global _stdin
    _stdin = None


@contextlib.contextmanager
def stdout_for_data() -> Iterator[None]:
    """While a command writes a file to ``-``: that file gets standard output to itself, and
    everything printed for a person goes to standard error."""
    global _data_out
    _data_out = sys.stdout.buffer
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _data_out = None


def read_text(path: str | os.PathLike[str], max_bytes: int, what: str) -> str:
    """The UTF-8 text of the regular file ``path``, refusing anything larger than ``max_bytes``.

    ``what`` names the kind of file in messages ("a case file", "a trace").
    ``-`` reads standard input (once: later reads get the same text).
    """
    assert max_bytes > 0, max_bytes
    if is_stdio(path):
        try:
            return _read_stdin(max_bytes, what).decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputError(f"standard input: not UTF-8 text (byte {error.start})") from None
    try:
        # Non-blocking, so opening a FIFO with no writer returns at once (and is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not {what}") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise InputError(f"{path}: is a directory, not {what}")
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: not a regular file; {what} must be one")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, min(_CHUNK_BYTES, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise InputError(f"{path}: larger than the {max_bytes:,} bytes {what} may hold")
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(f"{path}: not UTF-8 text (byte {error.start})") from None


#: JSON's whitespace (``str.strip()`` would also strip what a JSON parser refuses).
_JSON_SPACE: Final = " \t\r"


def json_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a JSON-lines file (a trace, a traffic file) with their line numbers, blank ones
    left out.

    Lines end at ``"\n"`` only: a JSON string may hold U+2028 or a form feed, which
    ``str.splitlines()`` would split at (traces are written UTF-8, not ASCII-escaped). A line
    holding only JSON whitespace is blank and skipped; numbers count every line of the file,
    blank ones included, so a message's ``path:line`` is where an editor puts it.
    """
    return [
        (number, line) for number, line in enumerate(text.split("\n"), start=1) if line.strip(_JSON_SPACE)
    ]


def parse_json(text: str) -> Any:
    """``text`` as strict JSON; InputError says what is wrong (the caller adds which file or line).

    Strict: ``NaN`` and ``Infinity`` are not JSON, and an object may not name
    a key twice (Python would keep the last value without a word, so a file
    would not mean what it seems to say); the message names the key and the
    object that repeats it. Bounded: an integer of more digits than Python
    converts, or nesting deeper than its recursion limit, is refused with a
    message rather than a traceback.
    """
    try:
        return json.loads(text, parse_constant=_not_json, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as error:
        raise InputError(f"not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except _NotJson as error:
        raise InputError(f"not JSON ({error})") from None
    except _DuplicateKey:
        raise InputError(_where_duplicated(text)) from None
    except ValueError:  # Python's bound on the digits of an integer it converts
        raise InputError(f"a number with more than {sys.get_int_max_str_digits()} digits") from None
    except RecursionError:
        raise InputError("not JSON (nested too deeply)") from None


class _NotJson(ValueError):
    pass


def _not_json(name: str) -> NoReturn:
    raise _NotJson(f"{name} is not a JSON value")


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey
    return obj


#: The most characters of a key or of its place that a message shows.
_SHOWN_CHARS: Final = 100


def _cut(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}..."


class _Repeats(dict[str, Any]):
    """An object as parsed a second time, to say where a key repeats: ``repeated`` is the first
    key it names twice, if any."""

    repeated: str | None = None


def _keeping_repeats(pairs: list[tuple[str, Any]]) -> _Repeats:
    obj = _Repeats()
    for key, value in pairs:
        if key in obj and obj.repeated is None:
            obj.repeated = key
        obj[key] = value
    return obj


def _where_duplicated(text: str) -> str:
    """The message for JSON that names a key twice in an object: the key, and the object's
    place (``config.holder``, ``faults.cancels[0]``) in the document.

    Only called once the first parse failed on it, so a file's normal reading pays for one
    parse; objects are searched in document order, outer ones first.
    """

    def find(value: Any, where: str) -> str | None:
        if isinstance(value, _Repeats):
            if value.repeated is not None:
                place = f"in {_cut(where)}" if where else "at the top level"
                return f"key {_cut(repr(value.repeated))} given twice {place}; each key may appear once"
            for key, inner in value.items():
                found = find(inner, f"{where}.{key}" if where else key)
                if found:
                    return found
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                found = find(inner, f"{where}[{index}]")
                if found:
                    return found
        return None

    try:
        found = find(json.loads(text, parse_constant=_not_json, object_pairs_hook=_keeping_repeats), "")
    except RecursionError:  # nested nearly as deep as Python allows: say what, if not where
        found = None
    return found or "an object gives a key twice; each key may appear once"


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same path once resolved (``./x``, a symbolic link),
    or one file under two names (a hard link)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False  # one of them does not exist (yet): only equal paths could collide


def check_output_file(path: Path, option: str, formats: Iterable[str] | None = None) -> Path:
    """Fail now, before a long run, if ``path`` cannot be written; returns ``path``.

    ``option`` names the flag in messages (``--plot``). With ``formats``,
    the file's extension must be one of them (a plot's image formats).
    The check opens the file for appending, which changes no content, and
    removes it again if it did not exist.
    """
    if is_stdio(path):
        return path  # standard output: nothing to check
    if str(path) in ("", "."):
        raise InputError(f"{option}: needs a file name, got {str(path)!r}")
    if formats is not None:
        suffix = path.suffix.lower().lstrip(".")
        known = sorted(set(formats))
        if suffix not in known:
            shown = f"'.{suffix}'" if suffix else "no extension"
            raise InputError(
                f"{option} {path}: {shown} is not an image format; use one of: {', '.join(known)}"
            )
    if path.is_dir():
        raise InputError(f"{option} {path}: is a directory")
    if path.exists() and not path.is_file() and str(path) != os.devnull:
        raise InputError(f"{option} {path}: not a regular file (only {os.devnull} may stand in for one)")
    parent = path.parent
    if not parent.is_dir():
        raise InputError(f"{option} {path}: no directory {parent}")
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as error:
        raise InputError(f"{option} {path}: cannot write: {error.strerror or error}") from None
    if not existed:
        path.unlink(missing_ok=True)
    return path


def check_output_dir(path: Path, option: str) -> Path:
    """Fail now if files cannot be created in directory ``path`` (made later, when needed).

    The nearest existing ancestor must be a directory that accepts a new
    entry; the check makes and removes a probe there.
    """
    probe_in = path
    while not probe_in.exists():
        if probe_in.parent == probe_in:
            break
        probe_in = probe_in.parent
    if not probe_in.is_dir():
        raise InputError(f"{option} {path}: {probe_in} is not a directory")
    probe = probe_in / f".semsim-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError as error:
        reason = error.strerror or error
        raise InputError(f"{option} {path}: cannot create files in {probe_in}: {reason}") from None
    probe.rmdir()
    return path


def write_whole(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all.

    The bytes go to a temporary file beside ``path``, are flushed to the
    disk, and the file then takes ``path``'s place in one rename: whatever
    fails part-way (a full disk, a crash, Ctrl-C) leaves ``path`` as it
    was, or absent, and no temporary file behind. The new file gets the
    mode a plain ``open()`` would give it (or keeps the old file's). An
    existing file that is not a regular file (``os.devnull``) cannot be
    replaced and is written directly.

    Raises ``OSError`` naming ``path`` (the command line makes it exit
    status 2, one line). ``-`` writes to standard output (see :func:`stdout_for_data`).
    """
    if is_stdio(path):
        out = _data_out if _data_out is not None else sys.stdout.buffer
        out.write(data)
        out.flush()
        return
    target = Path(path)
    if target.exists() and not target.is_file():
        with open(target, "wb") as out:
            out.write(data)
        return
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(target)) from None
    try:
        _write_all(fd, data)
        os.fsync(fd)
        os.fchmod(fd, stat.S_IMODE(target.stat().st_mode) if target.exists() else _new_file_mode())
        os.close(fd)
        fd = -1
        os.replace(temporary, target)
    except BaseException as error:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise OSError(error.errno, error.strerror, str(target)) from None
        raise


def write_text_whole(path: str | os.PathLike[str], text: str) -> None:
    """:func:`write_whole` for UTF-8 text."""
    write_whole(path, text.encode("utf-8"))


def _write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd`` (``os.write`` may write fewer than it is given)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@functools.cache
def _new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0o666 less the process's umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
