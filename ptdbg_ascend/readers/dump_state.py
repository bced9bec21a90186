"""Is a dump complete? Tell compare/parse users when the dump they read ended torn (no clean close).

The dump writers leave three marks of a dump that did not end cleanly:

* ``.ptdbg.lock`` (``"{pid} {host}"``, see :class:`ptdbg_ascend.fs.locks.DumpLock`) exists in the rank
  directory from the first write of a window to its clean close (``set_dump_switch("OFF")``,
  ``PrecisionDebugger.stop()``, the interpreter's exit). A writer killed (SIGKILL, the OOM killer, a crash)
  leaves it; one whose process ends on an uncaught exception with its window on leaves it too, with a
  second line ``cut: {why}``;
* every final file is written under a temporary ``.{name}.XXXXXXXX.tmp`` name and renamed, so a kill
  mid-write leaves such a file;
* a pkl line goes out in one write: a pkl whose last byte is not a newline was cut mid-write (a kill),
  which is seen even in a dump copied without its lock.

:func:`check_dump` reads those marks next to a dump that was just read and, when it is torn, logs one
warning saying which case it is and how far the dump got (complete calls and records read, the last
complete call, a partial last pkl line, leftover temporary files) and returns a :class:`TornDump` for the
report. Compare still runs on what is there. :func:`missing_dump_note` says what a rank directory holds
when its ``dump.json`` is missing (a PrecisionDebugger run killed before the step's first flush).
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional, Sequence, Set

from ptdbg_ascend.formats.records import CallRecord
from ptdbg_ascend.errors import DumpPathError
from ptdbg_ascend.formats.layout import PT_SUFFIX, TENSOR_DIR, default_data_dir, is_dump_json
from ptdbg_ascend.formats.naming import leading_call_name
from ptdbg_ascend.log import logger
from ptdbg_ascend.fs.writes import TEMP_SUFFIX, is_temporary_name
from ptdbg_ascend.fs.locks import DumpLock, host_name, pid_alive

RUNNING = "running"  # the lock's holder is alive on this host
ENDED = "ended"  # the lock's holder is gone, or no lock but leftover temporary files
UNKNOWN = "unknown"  # a lock of another host (a copied dump) or an unreadable lock

TAIL_BYTES = 65536  # how much of a pkl's end is read to find a partial last line (one line is far shorter)


class TornDump(NamedTuple):
    """A dump that was not closed cleanly, and how far it got.

    ``state``: ``"running"`` (the writer holds the lock and is alive: ``pid`` on ``host``), ``"ended"`` (the
    writer is gone: killed or crashed) or ``"unknown"`` (the lock names another host, or cannot be read:
    ``note`` says which). ``calls``/``records``: complete calls and tensor records read. ``last_call``: the last
    complete call (legacy record-name grammar; None when none). ``partial_line``: a legacy pkl ends in a
    partial line (the reader skips it). ``temp_files``: leftover ``.*.tmp`` files in the rank and data
    directories. ``note``: why the state is unknown. ``cut``: why the writer's process ended with its
    window on, as its lock says (e.g. "the process exited on an uncaught KeyboardInterrupt ..."; "" when it
    does not say)."""

    side: str
    dump_path: str
    state: str
    pid: Optional[int]
    host: Optional[str]
    calls: int
    records: int
    last_call: Optional[str]
    partial_line: bool
    temp_files: int
    note: str = ""
    cut: str = ""

    def describe(self) -> str:
        """One sentence for the log and the reports."""
        if self.state == RUNNING:
            head = f"is still being written by pid {self.pid} on {self.host}"
        elif self.state == ENDED and self.pid is not None:
            head = "ended without a clean close (pid {} on host {} is gone{})".format(
                self.pid, self.host, "; " + self.cut if self.cut else "")
        elif self.state == ENDED and self.partial_line and not self.temp_files:
            head = "was cut short (it ends in a partial line) and ended without a clean close"
        elif self.state == ENDED:
            head = "ended without a clean close"
        else:
            head = f"may be incomplete: {self.note}"
        got = "{} complete call{} ({} tensor record{})".format(
            self.calls, "" if self.calls == 1 else "s", self.records, "" if self.records == 1 else "s")
        # dump.json is rewritten whole now and then (atomic replace): what is read is its last flush.
        got = "its last flush holds " + got if is_dump_json(self.dump_path) else got + " read"
        if self.last_call is not None:
            got += f", the last complete call is {self.last_call}"
        extras = []
        if self.partial_line:
            extras.append("the pkl ends in a partial line (skipped)")
        if self.temp_files:
            extras.append("{} leftover temporary file{} (.*{})".format(
                self.temp_files, "" if self.temp_files == 1 else "s", TEMP_SUFFIX))
        return f"{self.side} dump {self.dump_path} {head}: {got}{'; ' + '; '.join(extras) if extras else ''}."


def check_dump(side: str, dump_path: str, data_dir: Optional[str], calls: Sequence[CallRecord],
               consequence: str = "Compare runs on what is there.") -> Optional[TornDump]:
    """Look for the marks of a torn dump around ``dump_path`` (its directory is the rank directory) and
    ``data_dir`` (default when None: the dump's own tensor directory, ``{stem}/`` beside a pkl or
    ``dump_tensor_data/`` beside a dump.json). ``calls``: what the reader read from ``dump_path``.
    ``side`` names the dump in the message ("NPU", "Bench"...); ``consequence`` ends the warning (default:
    "Compare runs on what is there."). Logs one warning and returns the
    :class:`TornDump` when the dump is torn; None (and no log) when it was closed cleanly."""
    rank_dir = os.path.dirname(os.path.abspath(dump_path))
    lock = _lock_state(rank_dir)
    temp_files = _count_temp_files({rank_dir, data_dir or default_data_dir(dump_path)})
    # A pkl cut mid-line is torn even without the other marks (a dump copied without its lock).
    partial, partial_call = _partial_last_line(dump_path) if not is_dump_json(dump_path) else (False, None)
    if lock is None and not temp_files and not partial:
        return None
    state, pid, host, note, cut = lock if lock is not None else (ENDED, None, None, "", "")
    complete = list(calls)
    # The pkl's last line was cut inside a call: that call is not complete.
    if partial and complete and complete[-1].name == partial_call:
        complete = complete[:-1]
    torn = TornDump(side, dump_path, state, pid, host, len(complete), sum(len(call.records) for call in complete),
                    complete[-1].name if complete else None, partial, temp_files, note, cut)
    logger.warning(torn.describe() + " " + consequence)
    return torn


def _lock_state(rank_dir: str):
    """``(state, pid, host, note, cut)`` of ``rank_dir``'s lock, or None when there is none."""
    try:
        holder = DumpLock(rank_dir).holder()  # reads it with O_NOFOLLOW, parses "pid host" (+ "cut: why")
    except DumpPathError as error:
        return UNKNOWN, None, None, f"its directory holds a dump lock that cannot be read ({error})", ""
    if holder is None:  # no lock: the writer closed cleanly
        return None
    pid, host, cut = holder
    if pid < 0:  # an empty lock: its writer is creating it right now
        return RUNNING, None, "this host", "", ""
    if host != host_name():
        note = ("its directory holds the dump lock of pid {} on host {}, another host: that writer is still running "
                "there or ended without a clean close".format(pid, host))
        if cut:
            note = f"its directory holds the dump lock of pid {pid} on host {host}, which says: {cut}"
        return UNKNOWN, pid, host, note, cut
    return (ENDED if cut or not pid_alive(pid) else RUNNING), pid, host, "", cut


def _count_temp_files(directories: Set[str]) -> int:
    """Leftover ``.{name}.XXXXXXXX.tmp`` files (fs/writes.temporary_beside) in ``directories``."""
    count = 0
    seen = set()
    for directory in directories:
        real = os.path.realpath(directory)
        if real in seen:
            continue
        seen.add(real)
        try:
            with os.scandir(directory) as entries:
                count += sum(1 for entry in entries if is_temporary_name(entry.name))
        except OSError:  # no such directory (summary-only dump) or unreadable: nothing to count
            continue
    return count


def _partial_last_line(path: str):
    """``(partial, call)``: whether the file's last byte is not a newline (the writer puts a whole line, or
    a whole call's lines, in one write: only a write cut short by a kill or a full disk ends mid-line) and
    the call the partial line starts with (None when its name is cut too)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                return False, None
            handle.seek(max(0, size - TAIL_BYTES))
            tail = handle.read()
    except OSError:
        return False, None
    if tail.endswith(b"\n"):
        return False, None
    last = tail.rsplit(b"\n", 1)[-1].decode("utf-8", "replace")
    if not last.startswith('["'):  # a pkl line is a JSON array whose first item is the record name
        return True, None
    return True, leading_call_name(last[2:].split('"', 1)[0])


def missing_dump_note(dump_path: str) -> str:
    """Why ``dump_path`` (a ``dump.json`` that does not exist) is missing, from what its directory holds:
    the lock of the writer and the tensor files it wrote before it first wrote dump.json (a
    PrecisionDebugger step killed early). "" when the directory holds neither (a wrong path)."""
    if not is_dump_json(dump_path):
        return ""
    rank_dir = os.path.dirname(os.path.abspath(dump_path))
    if not os.path.isdir(rank_dir):
        return ""
    lock = _lock_state(rank_dir)
    tensors = _count_files(os.path.join(rank_dir, TENSOR_DIR), PT_SUFFIX)
    if lock is None and not tensors:
        return ""
    holds = []
    if tensors:
        holds.append(f"{tensors} tensor file{'' if tensors == 1 else 's'} in {TENSOR_DIR}")
    if lock is not None:
        state, pid, host, note, cut = lock
        if state == RUNNING and pid is not None:
            holds.append(f"the dump lock of pid {pid} on {host}, still running")
        elif state == ENDED:
            holds.append(f"the dump lock of pid {pid} on host {host}, which is gone{'; ' + cut if cut else ''}")
        else:
            holds.append(note[len("its directory holds "):] if note.startswith("its directory holds ") else note)
    return ("its directory holds {}: the run writing it {} before it first wrote {} (a PrecisionDebugger writes it "
            "about a second after the step starts, then about once a second: doc/safety_guide.md), so the calls "
            "of this step are lost; compare an earlier step.".format(
                " and ".join(holds), "is still running, or was killed" if lock is not None and lock[0] == RUNNING
                else "was killed", os.path.basename(dump_path)))


def _count_files(directory: str, suffix: str) -> int:
    try:
        with os.scandir(directory) as entries:
            return sum(1 for entry in entries if entry.name.endswith(suffix) and not entry.name.startswith("."))
    except OSError:
        return 0
