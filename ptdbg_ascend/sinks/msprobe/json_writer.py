"""The msprobe 1.0.4 dump format on disk: one ``step{N}/rank{R}/`` directory (``formats/layout``) of
dump.json, stack.json, construct.json and the ``.pt`` files, as ``reference/msprobe_1_0_4.md`` §5-6.

The writer is a formatter: it receives entries (their text, written by ``sinks/msprobe/encoder``) and tensors.
The JSON text is msprobe's (its key order, ``indent=1``, bare ``NaN``/``Infinity`` tokens); ``.pt``
files are ``torch.save`` of a detached contiguous copy, keeping device and dtype (bf16 stays bf16), written by
a background thread; the copy is taken at once, so a later in-place update of the tensor (optimizer step)
cannot change what is saved. That thread also reads a CPU tensor's statistics from the copy
(``late_statistics.py``); a tensor saved again unchanged gets a hard link to its first file (files 0640).

Unlike 1.0.4 (§12 quirk 3), :meth:`MsprobeJsonWriter.flush` rewrites the files with *every* entry of the
step so far: a second start()/stop() window in a step adds to the first. JSON files are replaced atomically
(temporary file, then rename): a crash leaves the previous complete file, never half a JSON document.

While entries arrive, the three files are also rewritten periodically with the *finished* entries (never
naming a file not yet written: ``entries.py``), when ``rewrite_schedule.py`` says (at most once per ``max_delay``
seconds, default ``background.DEFAULT_MAX_DELAY``, and at most ~10 % of the time), as a job of the writer thread
or, without one, at the ``add_entry`` that finds it due. A SIGKILL therefore loses at most the entries of about
the last ``2 * max_delay`` seconds (plus the last rewrite's duration when it is long).

A full disk (or any write error) stops the dump with the JSON files complete: ``.ptdbg.reserve``
(``reserve.py``) holds back the space the next rewrite needs, grown to cover every entry before a later
file takes any space (by each ``.pt`` file's job; without tensor files, by ``add_entry``). The first failed
write (a ``.pt`` file, a rewrite even with the reserve's space, or the reserve itself) removes the reserve,
the failed file's partial copy and the files of unfinished entries, and rewrites the three files with every
finished entry. From then on every record raises the same :class:`DumpWriteError` (path, error, what
dump.json holds), or ``stop()`` does when no record came after the error, until the next ``start()``
(:meth:`claim`) records again after the finished entries; nothing is written meanwhile, nothing is glued.
"""

from __future__ import annotations

import os
import threading
from json.encoder import encode_basestring_ascii
import time
from typing import Any, List, Optional, Tuple

from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.formats.layout import DUMP_FILE, PT_SUFFIX, tensor_dir
from ptdbg_ascend.sinks import background as background_module
from ptdbg_ascend.sinks.background import BackgroundWriter
from ptdbg_ascend.sinks.msprobe.encoder import ENTRY_DEPTH, entry_length
from ptdbg_ascend.sinks.msprobe.entries import StepEntries
from ptdbg_ascend.sinks.msprobe.json_files import Texts, WriteFile, write_atomic, write_files, write_with_reserve
from ptdbg_ascend.sinks.msprobe.json_text import member_text
from ptdbg_ascend.sinks.msprobe.late_statistics import LateStatistics, PendingStatistics, StatisticsPlanner
from ptdbg_ascend.sinks.host_copies import host_tensor, release_copy
from ptdbg_ascend.sinks.msprobe.pt_files import save_pt, snapshot, tensor_error_text
from ptdbg_ascend.sinks.msprobe.reserve import CONSTRUCT, SEPARATOR, STACK, JsonReserve
from ptdbg_ascend.sinks.msprobe.rewrite_schedule import RewriteSchedule
from ptdbg_ascend.fs.writes import link_file, own_dir, own_dirs, remove_quietly
from ptdbg_ascend.fs.locks import RankDirectoryClaim


class MsprobeJsonWriter:
    """Writes one ``step{N}/rank{R}`` directory.

    Args:
        directory: the ``step{N}/rank{R}`` directory (created on first write).
        task: the dump.json ``task`` value.
        level: the dump.json ``level`` value.
        saves_tensors: whether ``.pt`` files are written (``dump_data_dir`` is null otherwise).
        background: the thread that writes ``.pt`` files (and runs the periodic rewrites); None writes
            them at once. Default None.
        flush_every: also rewrite the JSON files after this many new entries (still no sooner than
            ``REWRITE_COST_FACTOR`` times the last rewrite's duration). Default None: by time only.
        max_delay: seconds between periodic rewrites while entries arrive. Default None:
            ``background.DEFAULT_MAX_DELAY`` (1.0 s) read now, the legacy writer's bound.
        statistics: its leaves' statistics planner. Default None: ``LateStatistics``' (the front-ends').
        write_file: ``write(path, text)`` of each JSON file. Default ``json_files.write_atomic`` (a slow disk
            in tests).

    Attributes:
        rewrites: periodic rewrites done so far; ``rewrite_seconds``: the time they took.
    """

    def __init__(self, directory: str, task: str, level: str, saves_tensors: bool,
                 background: Optional[BackgroundWriter] = None, flush_every: Optional[int] = None,
                 max_delay: Optional[float] = None, statistics: Optional[StatisticsPlanner] = None,
                 write_file: WriteFile = write_atomic) -> None:
        self.directory = directory
        self.task = task
        self.level = level
        self.saves_tensors = saves_tensors
        self.tensor_dir = tensor_dir(directory)
        self._background = background
        self._write_file = write_file
        self._schedule = RewriteSchedule(background_module.DEFAULT_MAX_DELAY if max_delay is None else max_delay,
                                         flush_every)
        self._space = JsonReserve(directory)
        self._entries = StepEntries(self._space)
        self._made_dirs = False
        self._rank_dir = RankDirectoryClaim()  # step/rank directories and their lock
        self._lock = threading.Lock()  # backward hooks may run on autograd's threads
        # Which entries are finished. ``.pt`` jobs are numbered as queued (``_queued``, under
        # ``_submit_lock`` so numbers follow the queue's order); the writer thread runs them in order, so
        # ``_written`` (the number of the last one written) says that all before it are on disk.
        self._submit_lock = threading.Lock()
        self._queued = 0
        self._written = 0
        # A full disk (module docstring): the reserve (``_space``, above), the first write error's message
        # (None while all is well; set, nothing more is written), whether the training thread has raised it
        # yet, and the data_names queued since the last add_entry (an entry still being built: its files are
        # removed when a write error leaves it unfinished).
        self._failed: Optional[str] = None
        self._reported = False
        self._unclaimed: List[str] = []
        self._unclaimed_lock = threading.Lock()  # never held across a wait (submit may block under _submit_lock)
        self._entries_on_disk = 0  # in dump.json as last written
        # One rewrite at a time, so the files never go back to an older state (reentrant: a rewrite that
        # fails goes on to the last rewrite after the error).
        self._rewrite_lock = threading.RLock()
        # Statistics that come later (late_statistics.py): read back from a device in batches at the rewrites,
        # or read by the writer thread from the copy it saves. An entry waiting for them is not finished.
        self.late = LateStatistics(statistics)

    @property
    def rewrites(self) -> int:
        """The periodic rewrites done so far."""
        return self._schedule.rewrites

    @property
    def rewrite_seconds(self) -> float:
        """The time they took."""
        return self._schedule.seconds

    # -- adding ----------------------------------------------------------------------------------
    def add_entry(self, name: str, entry: Any) -> None:
        """Add (or extend: an in-place collective's output arrives after its input) the entry ``name``: its member
        text (``encoder.py``: finished, or an ``EntryTemplate``), or a dict of JSON values (written as
        ``json.dumps`` would). May rewrite the JSON files (see the module docstring). Raises
        :class:`DumpWriteError` after a write error (the entry is not added)."""
        if type(entry) is dict:
            entry = member_text(name, entry, ENTRY_DEPTH)
        if self._failed is not None:
            self._raise_failed()
        if not self._made_dirs:
            self._make_dirs()
        space = self._space
        if not self.saves_tensors:  # (with tensor files, each file's job grows the reserve first)
            try:  # the reserve covers this entry and its stack before they exist
                space.ensure(entry_length(entry) + SEPARATOR, 1)
            except OSError as error:
                self._stop_after_error(space.error_text(error))
            if self._failed is not None:
                self._raise_failed()
        with self._lock:
            added = self._failed is None  # else stopped meanwhile (on the writer thread)
            if added:
                if self._unclaimed:
                    with self._unclaimed_lock:
                        self._unclaimed = []  # the files queued since the last entry: this entry names them
                queued = self._queued
                self._entries.add(name, entry, queued if queued > self._written else None)
                due = self._schedule.due()
        if not added:
            self._raise_failed()
        if due:
            self._start_rewrite()
            if self._failed is not None:  # the rewrite ran here (no writer thread) and failed
                self._raise_failed()

    def add_stack(self, name: str, lines: List[str]) -> None:
        """stack.json entry ``name`` -> its formatted frames."""
        self.add_stack_literals(name, [encode_basestring_ascii(line) for line in lines])

    def add_stack_literals(self, name: str, literals: List[str]) -> None:
        """:meth:`add_stack` with the frames as JSON string literals (``dump/stack.user_stack_literals``)."""
        with self._lock:
            self._space.added(STACK, self._entries.add_stack(name, literals))

    def add_construct(self, name: str, parent: Optional[str]) -> None:
        """construct.json entry ``name`` -> its parent module's name (None at top level)."""
        with self._lock:
            self._space.added(CONSTRUCT, self._entries.add_construct(name, parent))

    def save_tensor(self, stem: str, tensor: Any, statistics: Optional[PendingStatistics] = None,
                    same_as: Optional[str] = None) -> Optional[str]:
        """Queue ``{tensor_dir}/{stem}.pt`` and return its data_name; None when tensors are not saved.
        ``statistics`` (from :meth:`copy_statistics`; default None): filled by the writer thread from the copy. ``same_as`` (default None): the stem of a file this
        writer saved the same unchanged tensor to (one call's output, the next call's input): the file is
        then a hard link to it, and nothing is copied. Raises :class:`DumpWriteError` after a write error."""
        if not self.saves_tensors:
            return None
        if self._failed is not None:
            self._raise_failed()
        self._make_dirs()
        data_name = stem + PT_SUFFIX
        path = os.path.join(self.tensor_dir, data_name)
        first_path = None if same_as is None else os.path.join(self.tensor_dir, same_as + PT_SUFFIX)
        copy, nbytes = snapshot(tensor) if first_path is None else (None, 0)  # (out of memory: the sink says it)
        with self._submit_lock:
            self._queued += 1
            number = self._queued
            with self._unclaimed_lock:
                self._unclaimed.append(data_name)

            def job() -> None:
                if self._failed is not None:  # stopped: nothing more is written
                    return
                space = self._space
                try:
                    # Every entry that is finished if this write fails was added before it was queued:
                    # the reserve covers them all (counted by the bytes of their text at add_entry) before the
                    # file takes any space.
                    space.ensure()
                except OSError as error:
                    self._stop_after_error("Cannot write the tensor file {}: {}".format(
                        path, space.error_text(error, capital=False)))
                    return
                host = None
                try:
                    if first_path is None:
                        host = host_tensor(copy)  # an accelerator's copy reaches host memory here
                        save_pt(path, host)  # a partial file is removed (fs.writes.replace_file)
                    else:  # written by an earlier job (jobs run in order)
                        link_file(first_path, path, "the tensor file")
                except Exception as error:  # noqa: BLE001 - disk full, I/O error, torch's own
                    self._stop_after_error(tensor_error_text(path, error))
                    return
                if statistics is not None and host is not None:
                    self.late.from_copy(statistics, host)
                release_copy(copy)
                self._written = number

            if self._background is not None:
                self._background.submit(job, nbytes)
        if self._background is None:  # written here, outside the lock (a failure takes it)
            job()
            if self._failed is not None:
                self._raise_failed()
        return data_name

    def copy_statistics(self, tensor: Any) -> Optional[PendingStatistics]:
        """Statistics for the writer thread to read from the copy of ``tensor`` it will save, or None where
        they are read from ``tensor`` at the call (``LateStatistics.for_copy``; no writer thread)."""
        return self.late.for_copy(tensor) if self._background is not None else None

    # -- writing ---------------------------------------------------------------------------------
    def flush(self, json_only: bool = False) -> None:
        """Rewrite dump.json (and, unless ``json_only``, stack.json and construct.json) with every entry
        so far; waits for queued ``.pt`` files first, so dump.json never names a file not yet written.
        After a write error the files are already complete: nothing is written, and the error is raised
        (:class:`DumpWriteError`) if no record has raised it yet."""
        if self._background is not None:
            self._background.flush()
        self._rewrite(with_others=not json_only, periodic=False)
        if self._failed is not None and not self._reported:
            self._raise_failed()

    def _start_rewrite(self) -> None:
        if self._background is None:
            self._periodic_rewrite()
            return
        try:
            # A job of the writer thread: the training thread neither encodes nor writes, and the files
            # queued before it are on disk when it runs.
            self._background.submit(self._periodic_rewrite, 0)
        except BaseException:
            with self._lock:
                self._schedule.queued = False
            raise

    def _periodic_rewrite(self) -> None:
        try:
            self._rewrite(with_others=True, periodic=True)
        finally:
            with self._lock:
                self._schedule.queued = False

    def _rewrite(self, with_others: bool, periodic: bool) -> None:
        """Replace dump.json (and stack.json, construct.json) with the finished entries so far. A write
        that fails even with the reserve's space (or a reserve that cannot grow after a periodic
        rewrite) stops the dump (:meth:`_stop_after_error`)."""
        self._make_dirs()
        with self._rewrite_lock:
            if self._failed is not None:  # the files were rewritten at the error; nothing more is
                return
            started = time.monotonic()
            rendering = 0.0
            error = None
            try:
                self.late.batch.resolve()  # outside _lock: the training thread keeps adding entries
                with self._lock:
                    texts, rendering, shown = self._texts_locked(with_others)
                    self._schedule.unflushed = 0
                error = self._write_texts(texts, shown, keep_reserve=periodic)
            finally:
                with self._lock:
                    self._schedule.done(started, time.monotonic(), rendering, periodic)
            if error is not None:
                self._stop_after_error(error)

    def _texts_locked(self, with_others: bool) -> Tuple[Texts, float, int]:
        """(file name, text) of dump.json (and stack.json, construct.json) with the finished entries, the
        seconds spent encoding new members and the number of entries shown (under ``_lock``)."""
        return self._entries.texts((self.task, self.level, self.tensor_dir if self.saves_tensors else None),
                                   self._written, with_others, self._space)

    def _write_texts(self, texts: Texts, shown: int, keep_reserve: bool) -> Optional[str]:
        """Write the files (dump.json shows ``shown`` entries; ``json_files.write_with_reserve``); returns None, or
        why it failed."""
        written, error = write_with_reserve(self.directory, texts, self._space, keep_reserve, self._write_file)
        if written:
            self._entries_on_disk = shown
        return error

    # -- a write error ---------------------------------------------------------------------------
    def _stop_after_error(self, reason: str) -> None:
        """The first write error: nothing more is written (queued ``.pt`` jobs do nothing), the reserve
        is given back, the unfinished entries and their files are dropped, and the JSON files are
        rewritten with every finished entry. Later errors are ignored (the first one says it all).
        Called where no ``.pt`` file can be written meanwhile: in the writer thread's job, or where
        there is no writer thread (or it was just flushed)."""
        with self._rewrite_lock:  # held from the start: a record raises the complete message below
            with self._lock:
                if self._failed is not None:
                    return
                self._failed = reason
            self._space.release()
            try:
                self.late.batch.resolve()
            except Exception:  # noqa: BLE001 - a device gone too: its entries stay unfinished, dropped below
                pass
            with self._lock:
                self._texts_locked(with_others=False)  # takes the entries finished by now off the waiting lists
                orphans = self._drop_unfinished_locked()
                texts, _, shown = self._texts_locked(with_others=True)  # every entry left is finished
            for data_name in orphans:
                remove_quietly(os.path.join(self.tensor_dir, data_name))
            try:
                write_files(self.directory, texts, self._write_file)
                self._entries_on_disk = shown
                held = f"its dump.json holds the {shown} entr{'y' if shown == 1 else 'ies'} finished before the error"
            except DumpWriteError as error:  # even the reserve's space was not enough
                held = f"its dump.json could not be rewritten ({error}): {self._on_disk_text()}"
            self._failed = ("{}. Dumping to {} stopped: {}; nothing more is written to it. Free space (or fix the "
                            "cause) and call start() again to resume.".format(reason, self.directory, held))

    def _drop_unfinished_locked(self) -> List[str]:
        """Forget the entries still waiting (for a file or for statistics): back to their last finished
        version, or gone with their stack. Returns the data_names only they (or an entry still being
        built) named, whose files are to be removed (under ``_lock``)."""
        with self._unclaimed_lock:  # not _submit_lock: the training thread may hold it, waiting for this thread
            orphans, self._unclaimed = self._unclaimed, []
        orphans.extend(self._entries.drop_unfinished())
        return orphans

    def _on_disk_text(self) -> str:
        if not os.path.exists(os.path.join(self.directory, DUMP_FILE)):
            return "there is no dump.json"
        held = self._entries_on_disk
        return f"it holds the {held} entr{'y' if held == 1 else 'ies'} of its last rewrite"

    def _raise_failed(self) -> None:
        with self._rewrite_lock:  # the rewrite after the error may be running on the writer thread
            message = self._failed
        self._reported = True
        raise DumpWriteError(message)

    def _resume(self) -> None:
        """After a write error, a new ``start()``: the jobs of the failed window are done (they wrote
        nothing), the kept entries are all finished; record again."""
        if self._background is not None:
            try:
                self._background.flush()
            except DumpWriteError:
                pass
        with self._lock, self._submit_lock, self._unclaimed_lock:
            self._written = self._queued
            self._unclaimed = []
            self._failed = None
            self._reported = False

    def _make_dirs(self) -> None:
        if self._made_dirs:
            return
        # step{N} and rank{R} (and dump_tensor_data) are the tool's own: created, or checked to be real
        # directories (a symlink there is a DumpPathError, never followed).
        own_dirs(self.directory, 2)
        if self.saves_tensors:
            own_dir(self.tensor_dir)
        self._made_dirs = True

    def claim(self) -> None:
        """Create the directories and take the rank directory's lock (``.ptdbg.lock``): a second
        process writing the same step/rank directory gets a DumpPathError naming the holder. After a
        write error (``start()`` again): record again, from the finished entries."""
        self._rank_dir.claim(self.directory)
        self._make_dirs()
        if self._failed is not None:
            self._resume()

    def release(self, cut: str = "") -> bool:
        """Remove the reserve and give the lock back (stop(), exit); whether it was held. Idempotent. The
        reserve's blocks are given back by a helper thread (``JsonReserve.release``): the training thread
        does not wait. ``cut`` (default "": a clean close): why the step ends cut short; the lock stays."""
        self._space.release(wait=False)
        return self._rank_dir.release(cut)
