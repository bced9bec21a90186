"""The legacy format: :class:`LegacySink` writes ``{prefix}{stem}.pkl`` + npy files for a dump window, and
:class:`LegacyRecorder` is the one recorder (``dump/recorder.py``) with the legacy selection of the
window (``dump/selection.LegacySelection``) and this sink."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.dump.capture import gradient_records, input_records, output_records, tensors_in
from ptdbg_ascend.dump.observers import ApiCall
from ptdbg_ascend.dump.recorder import Recorder, RecordSink
from ptdbg_ascend.dump.selection import MODE_PREFIX, LegacySelection, SwitchConfig, Unmatched
from ptdbg_ascend.dump.stack import user_stack_json
from ptdbg_ascend.log import logger
from ptdbg_ascend.formats import layout
from ptdbg_ascend.formats.naming import STACK_SUFFIX
from ptdbg_ascend.sinks.background import BackgroundWriter
from ptdbg_ascend.sinks.legacy.pkl_writer import LegacyPklWriter
from ptdbg_ascend.fs.locks import RankDirectoryClaim
from ptdbg_ascend.fs.writes import LOCK_NAME


class DumpLocation:
    """Where one window writes: the tag dir; rank, pkl and npy dir once the rank is known."""

    def __init__(self, directory: str, tag: str, stem: str, version: str) -> None:
        self.tag_dir = layout.tag_dir(directory, tag, version)
        self.stem = stem

    def pkl_path(self, rank: int, mode: str) -> str:
        return layout.pkl_file(os.path.join(self.tag_dir, layout.rank_dir_name(rank)), MODE_PREFIX[mode] + self.stem)


class LegacySink(RecordSink):
    """Writes one window's records as legacy pkl lines and npy files.

    Args:
        session: the DumpSession (for the rank and the files this process already opened).
        config: the validated switch arguments (mode, sides, filter_switch, summary_only).
        location: the dump location.
        rank: ``register_hook(rank=)``; None resolves it from the first recorded call.
    """

    def __init__(self, session: Any, config: SwitchConfig, location: DumpLocation, rank: Optional[int]) -> None:
        self.session = session
        self.config = config
        self.location = location
        self.rank = rank
        self._writer: Optional[LegacyPklWriter] = None
        self._inputs = config.writes_tensors and "input" in config.sides
        self._outputs = config.writes_tensors and "output" in config.sides
        self._filter = config.filter_switch
        # The rank directory: created or checked, and locked (fs/locks.RankDirectoryClaim).
        self._rank_dir = RankDirectoryClaim()

    def claim(self, rank: int) -> None:
        """Create (or check: never a symlink) the tag and rank directories of ``rank`` and take the rank
        directory's lock: a second process writing there gets a DumpPathError naming the holder."""
        self._rank_dir.claim(os.path.dirname(self.location.pkl_path(rank, self.config.mode)))

    def _release(self, cut: str = "") -> None:
        self._rank_dir.release(cut)

    def inputs_before(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        # Their statistics and npy copies are taken now and written with the outputs, in the same lines.
        if self._inputs:
            records = input_records(call.forward_name, args, kwargs, self._filter)
            if records:
                with self.lock:
                    writer = self._writer or self._open((args, kwargs))
                    return writer.prepare(records, self.statistics.lookup)
        return None

    def forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any, before: Any,
                stack: bool) -> None:
        name = call.forward_name
        if call.inplace:  # the inputs were taken in inputs_before
            records = output_records(name, output, self._filter) if self._outputs else []
            self._write(name, records, (args, kwargs, output), stack, before)
            return
        records = input_records(name, args, kwargs, self._filter) if self._inputs else []
        if self._outputs:
            records.extend(output_records(name, output, self._filter))
        self._write(name, records, (args, kwargs, output), stack)

    def backward(self, call: ApiCall, backward_input: Sequence[Optional[Any]],
                 backward_output: Sequence[Optional[Any]], stack: bool) -> None:
        name = call.backward_name
        records = gradient_records(name, "input", backward_input, self._filter) if self._inputs else []
        if self._outputs:
            records.extend(gradient_records(name, "output", backward_output, self._filter))
        self._write(name, records, (backward_input, backward_output), stack)

    def _write(self, call_name: str, records: List[Tuple[str, Any]], sample: Any, stack: bool,
               before: Any = None) -> None:
        """Write one call's records and its stack line (after ``before``, the records an in-place call's
        inputs_before prepared)."""
        stack_line = user_stack_json(call_name + STACK_SUFFIX, 3) if stack else None
        with self.lock:
            writer = self._writer or self._open(sample)
            # The cache reduces (and saves) a tensor once while it is seen unchanged.
            writer.write_call(records, stack_line, self.statistics.lookup, before)

    def _open(self, sample: Any) -> LegacyPklWriter:
        rank = self.session.resolve_rank(self.rank, tensors_in(sample)[:1])
        self.rank = rank
        self.claim(rank)
        pkl_path = self.location.pkl_path(rank, self.config.mode)
        npy_dir = layout.npy_dir(pkl_path) if self.config.writes_npy else None
        fresh = pkl_path not in self.session.opened_files
        self.statistics.clear()
        # Lines alone are cheap to write in place; a writer thread would only fight the training thread
        # for the GIL. Tensor files go to the background thread.
        background = BackgroundWriter() if npy_dir is not None else None
        self._writer = LegacyPklWriter(pkl_path, npy_dir, background=background, own_background=True, fresh=fresh,
                                       own_levels=0)  # claim() created and checked them
        self.session.opened_files.add(pkl_path)
        return self._writer

    @property
    def pkl_path(self) -> Optional[str]:
        return self._writer.pkl_path if self._writer is not None else None

    @property
    def writer_busy_seconds(self) -> float:
        return self._writer.background_busy_seconds if self._writer is not None else 0.0

    def flush(self) -> None:
        with self.lock:
            if self._writer is not None:
                self._writer.flush()

    def close(self) -> None:
        self._close("")

    def close_cut(self, why: str) -> None:
        # The process ends with the window on (no OFF): what was recorded is written, and the lock stays
        # with why in it, so the dump reads as cut, not as a complete shorter run.
        self._close(why)

    def _close(self, cut: str) -> None:
        with self.lock:
            writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.close()
                if cut:
                    logger.warning("The dump {} ends cut short: {}. Its calls up to the exception are written; its "
                                   "{} stays in {}, so compare and parse name it as cut.".format(
                                       writer.pkl_path, cut, LOCK_NAME, os.path.dirname(writer.pkl_path)))
                else:
                    logger.info(f"Dump data of this window is in {writer.pkl_path}.")
        finally:
            self._release(cut if writer is not None else "")


class LegacyRecorder(Recorder):
    """Records the calls one ``set_dump_switch("ON", ...)`` window selects, in the legacy format.

    Args:
        session: the DumpSession (for the rank and the files this process already opened).
        config: the validated switch arguments.
        location: the dump location.
        rank: ``register_hook(rank=)``; None resolves it from the first recorded call.
    """

    def __init__(self, session: Any, config: SwitchConfig, location: DumpLocation, rank: Optional[int]) -> None:
        self.config = config
        self.legacy_sink = LegacySink(session, config, location, rank)
        stack = config.writes_stack
        super().__init__(LegacySelection(config), self.legacy_sink, stack_forward=stack, stack_backward=stack)

    def claim(self, rank: int) -> None:
        """Take the rank directory (see :meth:`LegacySink.claim`). ``set_dump_switch("ON")`` calls it when
        the rank is known then; else the first record does."""
        self.legacy_sink.claim(rank)

    @property
    def rank(self) -> Optional[int]:
        return self.legacy_sink.rank

    @property
    def pkl_path(self) -> Optional[str]:
        """The pkl this window writes (None until the first record)."""
        return self.legacy_sink.pkl_path

    @property
    def writer_busy_seconds(self) -> float:
        """Seconds this window's writer thread has spent writing so far (0.0 without npy files)."""
        return self.legacy_sink.writer_busy_seconds

    def flush(self) -> None:
        """Wait until everything recorded so far is on disk."""
        self.legacy_sink.flush()

    def close_cut(self, why: str) -> None:
        try:
            self.legacy_sink.close_cut(why)
        finally:
            self._say_unmatched()

    def close(self) -> None:
        try:
            self.legacy_sink.close()
        finally:
            self._say_unmatched()

    def _say_unmatched(self) -> None:
        """The window's names that matched no call, said once at its end (a typo, a counter off by one, an
        API that did not run): the dump is empty or shorter than asked, and nothing else would say so."""
        text = unmatched_text(self.selection.unmatched(), self.config.mode, self.config.scope)
        if text:
            logger.warning(text)


# Where a scope name's counter comes from: what a user most often gets wrong in them.
NAMES_HINT = ("Names count each API's calls from 0 (Torch_relu_0_forward is the first torch.relu); ptdbg parse "
              "shows the names a dump holds.")


def unmatched_text(unmatched: Unmatched, mode: str, scope: Sequence[str]) -> str:
    """The warning of a legacy window's ``unmatched`` names (mode ``mode``, ``scope`` the window's), or ""
    when every name matched."""
    if unmatched.start is not None:
        return "The start of the range (mode {!r}), {!r}, matched no call in this dump window: nothing was dumped. " \
            "{}".format(mode, unmatched.start, NAMES_HINT)
    if unmatched.end is not None:
        return "The end of the range (mode {!r}), {!r}, matched no call in this dump window: every call from {!r} " \
            "to the end of the window was dumped. {}".format(mode, unmatched.end, scope[0], NAMES_HINT)
    if not unmatched.items:
        return ""
    parameter = "api_list" if mode == "api_list" else "scope"
    text = "{} of the {} {} item{} (mode {!r}) matched no call in this dump window: {}{}.".format(
        len(unmatched.items), unmatched.total, parameter, "" if unmatched.total == 1 else "s", mode,
        ", ".join(repr(item) for item in unmatched.items),
        "; nothing was dumped" if len(unmatched.items) == unmatched.total else "")
    return text if mode == "api_list" else text + " " + NAMES_HINT
