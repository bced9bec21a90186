"""The legacy dump format's writer: one ``.pkl`` (JSON lines, ``formats/pkl.py``) plus one ``.npy`` per
tensor record (``npy_files.py``), appended as the run goes.

Every line is written in one ``write`` and flushed, and only after its ``.npy`` is complete, so a
killed process leaves a file whose every line parses and whose every tensor line has its npy.
bf16 and float8 tensors are saved as float32, complex32 as complex64 (numpy has no such types; every
value is exactly representable); the pkl ``dtype`` stays the tensor's own. Tensors of special kinds
(vmap/grad wrappers, nested, sparse, quantized, meta...) are recorded as ``tensor_kinds.py`` says.
"""

from __future__ import annotations

import os
from typing import Any, Callable, List, Optional, Sequence, Tuple

from ptdbg_ascend.tensor_kinds import transforms_active
from ptdbg_ascend.errors import DumpWriteError
from ptdbg_ascend.formats.pkl import SCALAR_SHAPE_TEXT, line_head, record_text, stack_line
from ptdbg_ascend.sinks.background import BackgroundWriter
from ptdbg_ascend.sinks.host_copies import on_host, release_copy
from ptdbg_ascend.sinks.legacy.line_texts import DTYPE_TEXTS, SHAPE_TEXTS, NumbersText, dtype_text, shape_text
from ptdbg_ascend.sinks.legacy.missing_npy import MissingNpyFiles
from ptdbg_ascend.sinks.legacy.npy_files import save_npy, take_special
from ptdbg_ascend.sinks.legacy.pkl_file import open_pkl
from ptdbg_ascend.fs.writes import link_file, remove_quietly, write_all
from ptdbg_ascend.statistics.eager import scalar_statistics
from ptdbg_ascend.statistics.pending import WRITER, PendingStatistics
from ptdbg_ascend.statistics.planner import StatisticsPlanner
from ptdbg_ascend.statistics.rules import LEGACY

# lookup(tensor, record name[, compute]) -> (statistics, name of an earlier record of the same unchanged
# tensor or None); ``compute(tensor)`` makes the statistics of a tensor not seen before (see
# StatisticsCache.lookup). write_call passes ``compute`` for the tensors whose statistics it defers.
StatisticsLookup = Callable[..., Tuple[List[Optional[float]], Optional[str]]]

class PreparedRecords:
    """Records taken by :meth:`LegacyPklWriter.prepare`, not written yet (lines, npy copies, pending
    statistics); one ``write_call(..., before=)`` of the same writer writes them."""

    __slots__ = ("writer", "lines", "files", "reductions", "nbytes")

    def __init__(self, writer: LegacyPklWriter) -> None:
        self.writer: Optional[LegacyPklWriter] = writer
        self.lines: List[Any] = []
        self.files: List[Tuple[str, Any, Optional[str]]] = []
        self.reductions: List[Tuple[Any, List[Optional[float]]]] = []
        self.nbytes = 0


class LegacyPklWriter:
    """Writer of one pkl file and its npy directory.

    Args:
        pkl_path: the ``.pkl`` file.
        npy_dir: the directory for ``{record name}.npy`` files; None writes statistics only
            (summary_only, stack mode). Default None.
        dump_step: the second field of every tensor line: 0 for dumps, 101 for overflow dumps. Default 0.
        background: a :class:`BackgroundWriter` that writes files off the calling thread; None writes
            synchronously. Default None. The writer does not own it unless ``own_background=True``.
        fresh: True deletes an existing pkl and npy directory of the same names first (a new run over
            the same path overwrites); False appends (another ON/OFF window of the same run). Default True.
        own_levels: how many of the pkl's innermost directories the writer owns (created, or checked to
            be real directories, not symlinks); the ones above are created as needed. Default 1 (the
            pkl's directory); the legacy recorder passes 2 (tag and rank directories).
        statistics: which way each tensor's statistics are computed (now, in a device batch, or by the
            writer thread from its npy copy). Default None: the legacy rules with the front-ends' defaults
            (``statistics.planner.DEFAULTS``, read now).

    Write errors: the first one (disk full...) truncates the pkl back to its last whole line, removes
    the files of the failed call and raises :class:`DumpWriteError`; every later write raises it again
    (nothing more is written) until a new writer is made.
    """

    def __init__(
        self,
        pkl_path: str,
        npy_dir: Optional[str] = None,
        *,
        dump_step: int = 0,
        background: Optional[BackgroundWriter] = None,
        own_background: bool = False,
        fresh: bool = True,
        own_levels: int = 1,
        statistics: Optional[StatisticsPlanner] = None,
    ) -> None:
        self.pkl_path = pkl_path
        self.npy_dir = npy_dir
        self.dump_step = dump_step
        self._background = background
        self._own_background = own_background
        self._descriptor, self._size = open_pkl(pkl_path, npy_dir, fresh, own_levels)
        # The first write error (disk full...): every later write is refused, so the pkl keeps only
        # whole lines whatever the caller does next. A new writer (a new ON) starts again.
        self._failed: Optional[str] = None
        self._closed = False
        # The middle of every tensor line: '", {dump_step}, [], "'.
        self._step_text = line_head(dump_step)
        self._numbers = NumbersText()
        # Which way statistics are computed (its device batch: accelerator tensors read back in batches), and
        # the lines held until their batch is read (statistics only; with a writer thread its jobs read the
        # batch).
        self._statistics = statistics or StatisticsPlanner(LEGACY)
        self._held: List[Any] = []
        self._missing = MissingNpyFiles(npy_dir)  # records left without npy (out of memory)

    # -- records -------------------------------------------------------------------------------
    def write_record(self, name: str, value: Any, statistics: Optional[List[Optional[float]]] = None,
                     same_as: Optional[str] = None) -> None:
        """Record a tensor or Python bool/int/float under ``name``: its npy (unless statistics only) and
        its pkl line. ``statistics`` may be given when the caller already computed them. ``same_as``
        names an earlier record of this writer holding the same unchanged tensor: its npy is then
        hard-linked instead of written again (a copy where links are not supported)."""
        if statistics is None and same_as is None:
            self.write_call([(name, value)])
        else:
            # A copy: the caller may reuse its list, and lines are formatted once per list object.
            given = list(statistics) if statistics is not None else None

            def lookup(tensor: Any, _name: str, _compute: Any = None) -> Tuple[List[Optional[float]], Optional[str]]:
                # Never deferred: a record linked to an earlier npy has no job that would fill them.
                return (given if given is not None else self._statistics.eager(tensor)), same_as

            self.write_call([(name, value)], lookup=lookup)

    def write_stack(self, name: str, frames: List[List[Optional[str]]]) -> None:
        """Append the stack line ``[name, frames]``; ``name`` ends with ``_stack_info``."""
        self.write_call([], stack_line=stack_line(name, frames))

    def prepare(self, records: Sequence[Tuple[str, Any]],
                lookup: Optional[StatisticsLookup] = None) -> PreparedRecords:
        """The statistics and npy copies of ``records`` taken now, written later by
        ``write_call(..., before=)``: the inputs of an in-place call are taken before the call changes
        them and written with its outputs, in one go (a call whose original raises is never written)."""
        prepared = PreparedRecords(self)
        prepared.nbytes = self._take(records, lookup, prepared.lines, prepared.files, prepared.reductions)
        return prepared

    def write_call(self, records: Sequence[Tuple[str, Any]], stack_line: Optional[str] = None,
                   lookup: Optional[StatisticsLookup] = None, before: Optional[PreparedRecords] = None) -> None:
        """The ``(name, value)`` records of one API call, then an optional pre-encoded stack line: npy
        files first, then every line in one write, so a killed process leaves the call whole or absent
        from the pkl.

        ``lookup(tensor, name)`` gives ``(statistics, same_as)`` for each tensor (see
        :meth:`write_record`; e.g. ``StatisticsCache.lookup``); None computes the statistics of every
        tensor here and writes every npy. Default None. ``before``: records of the same call taken
        earlier by :meth:`prepare` (an in-place call's inputs), written first. Default None.
        """
        if before is not None and before.writer is self:
            lines, files, reductions, nbytes = before.lines, before.files, before.reductions, before.nbytes
            before.writer = None  # used once
        else:
            lines, files, reductions, nbytes = [], [], [], 0
        nbytes += self._take(records, lookup, lines, files, reductions)
        if stack_line is not None:
            lines.append(stack_line + "\n")
        if not lines:
            return
        if self._closed:
            raise DumpWriteError(f"The dump file {self.pkl_path} is closed.")
        if self._failed is not None:
            raise DumpWriteError(self._failed)
        if not files and self._background is None:  # statistics only: straight to the file
            self._write_or_hold(lines)
        elif self._background is None:
            self._file_job(lines, files, reductions)()
        else:
            self._background.submit(self._file_job(lines, files, reductions), nbytes)

    def _write_or_hold(self, lines: List[Any]) -> None:
        """Whether the lines of a call without files are written now or held for the device batch."""
        batch = self._statistics.batch
        if batch is not None and (self._held or batch.has_pending()):
            # Lines waiting for device statistics, and every line after them (order), are held
            # until the batch is read: at BATCH_RECORDS tensors, after BATCH_SECONDS, at flush.
            self._held.extend(lines)
            if batch.due():
                self._write_held()
            return
        try:
            text = "".join(lines)
        except TypeError:
            # A record whose statistics the cache took from a tensor recorded before the last batch was
            # read: a (name, dtype, shape, statistics) line whose statistics are already filled in.
            text = "".join(line if isinstance(line, str) else record_text(*line, self._step_text) for line in lines)
        self._write_line(text)

    def _file_job(self, lines: List[Any], files: List[Tuple[str, Any, Optional[str]]],
                  reductions: List[Tuple[Any, List[Optional[float]]]]) -> Callable[[], None]:
        """The job that writes a call's npy files, then its lines: on the writer thread, or now without one."""
        planner = self._statistics
        batch = planner.batch
        head = self._step_text

        def job() -> None:
            if self._failed is not None:  # queued before the failure: nothing more is written
                return
            if batch is not None:
                batch.resolve()  # on the writer thread: the training thread never waits for the device
            for array, pending in reductions:
                planner.from_copy(pending, on_host(array))
            written: List[str] = []
            try:
                for path, array, source in files:
                    if source is not None:
                        link_file(source, path)
                    else:
                        save_npy(path, on_host(array))  # an accelerator's copy reaches host memory here
                        release_copy(array)  # its pinned host memory, for the call's next copy
                    written.append(path)
                # Jobs run in order: a pending list named here was filled by this job or an earlier one.
                self._write_line("".join(line if isinstance(line, str) else record_text(*line, head) for line in lines))
            except BaseException as error:
                # The call is absent from the pkl: so are its files.
                for path in written:
                    remove_quietly(path)
                self._fail(error)
                raise

        return job

    def _take(self, records: Sequence[Tuple[str, Any]], lookup: Optional[StatisticsLookup], lines: List[Any],
              files: List[Tuple[str, Any, Optional[str]]], reductions: List[Tuple[Any, List[Optional[float]]]]) -> int:
        """Append the lines, npy files and pending reductions of ``records`` (statistics computed and
        tensors copied now); returns the bytes of the copies."""
        # A line is its text, or (name, dtype, shape, statistics) while the statistics are pending
        # (formatted by record_text once filled): those of large float CPU tensors are computed by the
        # writer thread from the copy that goes to the npy file, so the training thread does not spend
        # three passes over them.
        nbytes = 0
        npy_dir = self.npy_dir
        numbers_of = self._numbers.text
        head = self._step_text
        # Only with npy files: there the copy exists anyway and the writer thread is busy with it. For
        # statistics alone a copy and a second busy thread cost more than the passes they save (~9 % of a
        # step on bench_dump's reference model).
        deferring = lookup is not None and npy_dir is not None and self._background is not None
        # Inside vmap/grad/jvp/functionalize the tensors may be transform wrappers: once per call.
        transformed = transforms_active()
        planner = self._statistics
        takes_device = planner.takes_device
        for name, value in records:
            if hasattr(value, "_version"):  # a torch tensor
                dtype = DTYPE_TEXTS.get(value.dtype) or dtype_text(value.dtype)
                if transformed:
                    nbytes += take_special(name, value, dtype, npy_dir, lines, files, head)[0]
                    continue
                statistics = array = None
                try:
                    shape = SHAPE_TEXTS.get(value.shape) or shape_text(value.shape)
                    # Inline, not a method: this runs once per tensor of every recorded call.
                    if lookup is None:
                        statistics, same_as = planner.eager(value), None
                    elif deferring and planner.takes_writer(value):  # a large CPU tensor: from its npy copy
                        statistics, same_as = lookup(value, name, planner.for_writer)
                    elif takes_device(value):
                        # An accelerator: reduced on the device now, read back with a batch (one sync
                        # per batch instead of one per tensor).
                        statistics, same_as = lookup(value, name, planner.device)
                    else:
                        # Small tensors on the calling thread: a writer thread would fight training for the GIL.
                        statistics, same_as = lookup(value, name)
                    if npy_dir is not None:
                        array = self._npy_file(name, value, statistics, same_as, files)
                        if array is not None:
                            nbytes += array.nbytes
                except Exception:  # noqa: BLE001 - RuntimeError, TypeError, AttributeError (jagged sizes)...
                    # Nested (no shape), sparse/quantized/meta/fake (no numpy()): the values tensor_kinds.py
                    # says such a record holds. Nothing of this record was appended yet.
                    taken, special = take_special(name, value, dtype, npy_dir, lines, files, head)
                    nbytes += taken
                    if _on_writer(statistics):  # handed out by the cache: never left unfilled
                        statistics.fill(special)
                    continue
                if type(statistics) is PendingStatistics:  # formatted once filled (its job, or its batch's read)
                    if same_as is None and array is not None and statistics.source is WRITER:
                        reductions.append((array, statistics))  # the first record of this tensor: its job fills them
                    lines.append((name, dtype, shape, statistics))
                    continue
            else:
                # The original writes a Python scalar's shape as the string "[]" (a 0-d tensor's as []).
                dtype, shape = str(type(value)), SCALAR_SHAPE_TEXT
                statistics = scalar_statistics(value)
                if npy_dir is not None:
                    files.append((os.path.join(npy_dir, name + ".npy"), value, None))
            # formats.pkl.RECORD_LINE, spelled out: a %-format of a constant compiles to an f-string.
            lines.append(f'["{name}{head}{dtype}", {shape}, {numbers_of(statistics)}]\n')
        return nbytes

    def _npy_file(self, name: str, value: Any, statistics: Any, same_as: Optional[str],
                  files: List[Tuple[str, Any, Optional[str]]]) -> Any:
        """Whether a tensor's npy links to an earlier record's or is a copy taken now: appends it to ``files``
        and returns the copy; None for a link, or when there is no memory for a copy (said by MissingNpyFiles:
        statistics its job would have read from the copy are computed now)."""
        npy_dir = self.npy_dir
        path = os.path.join(npy_dir, name + ".npy")
        if same_as is not None and same_as not in self._missing:
            files.append((path, None, os.path.join(npy_dir, same_as + ".npy")))
            return None
        # (a tensor whose first npy was not written is copied again, never linked)
        array = self._missing.copy(name, value)
        if array is not None:
            files.append((path, array, None))
        elif _on_writer(statistics):  # its job would read them from the copy
            statistics.fill(self._statistics.eager(value))
        return array

    @property
    def background_busy_seconds(self) -> float:
        """Seconds the background writer has spent on jobs (0.0 when writing synchronously)."""
        return self._background.busy_seconds if self._background is not None else 0.0

    def flush(self) -> None:
        """Wait until every record given so far is on disk (raises DumpWriteError on a failed write)."""
        self._write_held()
        if self._background is not None:
            self._background.flush()

    def close(self) -> None:
        """Write what is queued and close the pkl. Idempotent."""
        if self._closed:
            return
        try:
            self._write_held()
        finally:
            self._closed = True
        try:
            if self._background is not None:
                if self._own_background:
                    self._background.close()
                else:
                    self._background.flush()
        finally:
            os.close(self._descriptor)
            self._missing.say_summary()

    # -- internals -----------------------------------------------------------------------------
    def _write_held(self) -> None:
        """Read the pending device statistics and write the lines held for them (statistics only)."""
        if not self._held:
            return
        held, self._held = self._held, []
        self._statistics.device_batch().resolve()
        if self._failed is None:
            head = self._step_text
            self._write_line("".join(line if isinstance(line, str) else record_text(*line, head) for line in held))

    def _write_line(self, line: str) -> None:
        if self._failed is not None:
            raise DumpWriteError(self._failed)
        data = line.encode("utf-8")
        try:
            write_all(self._descriptor, data)
        except OSError as error:
            # Back to the last whole line: a partial line would glue to whatever comes next.
            try:
                os.ftruncate(self._descriptor, self._size)
            except OSError:
                pass
            self._fail(error)
            raise DumpWriteError(f"Cannot write to {self.pkl_path}: {error}") from error
        self._size += len(data)

    def _fail(self, error: BaseException) -> None:
        if self._failed is None:
            self._failed = ("Dumping to {} stopped after a write error ({}); nothing more is written to it. "
                            "Free space (or fix the cause) and call set_dump_switch('ON') again to resume."
                            .format(self.pkl_path, error))


def _on_writer(statistics: Any) -> bool:
    """Whether ``statistics`` are a pending value that a writer job fills from its npy copy."""
    return type(statistics) is PendingStatistics and statistics.source is WRITER

