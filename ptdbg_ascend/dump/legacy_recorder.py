"""The legacy recorder: the observer that writes ``{prefix}{stem}.pkl`` + npy files for a dump window."""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.dump.capture import collective_outputs, gradient_records, input_records, output_records, tensors_in
from ptdbg_ascend.dump.observers import ApiCall, CallObserver
from ptdbg_ascend.dump.selection import MODE_PREFIX, RangeState, SwitchConfig, selects_every_call, static_match
from ptdbg_ascend.dump.stack import user_stack_json
from ptdbg_ascend.dump.statistics import StatisticsCache
from ptdbg_ascend.log import logger
from ptdbg_ascend.naming import BACKWARD, FORWARD, STACK_SUFFIX
from ptdbg_ascend.writers.background import BackgroundWriter
from ptdbg_ascend.writers.legacy_pkl import LegacyPklWriter
from ptdbg_ascend.writers.safe_fs import DumpLock, own_dirs, remove_empty_dirs


class DumpLocation(object):
    """Where one window writes: the tag dir; rank, pkl and npy dir once the rank is known."""

    def __init__(self, directory: str, tag: str, stem: str, version: str) -> None:
        self.tag_dir = os.path.join(directory, "{}_v{}".format(tag, version))
        self.stem = stem

    def pkl_path(self, rank: int, mode: str) -> str:
        return os.path.join(self.tag_dir, "rank{}".format(rank), MODE_PREFIX[mode] + self.stem + ".pkl")


class LegacyRecorder(CallObserver):
    """Records the calls one ``set_dump_switch("ON", ...)`` window selects.

    Args:
        session: the DumpSession (for the rank and the files this process already opened).
        config: the validated switch arguments.
        location: the dump location.
        rank: ``register_hook(rank=)``; None resolves it from the first recorded call.
    """

    def __init__(self, session: Any, config: SwitchConfig, location: DumpLocation, rank: Optional[int]) -> None:
        self.session = session
        self.config = config
        self.location = location
        self.rank = rank
        self.range = RangeState(config.scope[0], config.scope[1]) if config.is_range else None
        self.matched = 0
        self._writer = None  # type: Optional[LegacyPklWriter]
        self._statistics = StatisticsCache()
        self._lock = threading.Lock()  # backward hooks may run on autograd's device threads
        # The switch decided once, not per call (every top-level call asks wants_forward).
        self._selects_all = selects_every_call(config)
        self._forward = FORWARD in config.directions
        self._backward = BACKWARD in config.directions
        self._inputs = config.writes_tensors and "input" in config.sides
        self._outputs = config.writes_tensors and "output" in config.sides
        self._stack = config.writes_stack
        self._filter = config.filter_switch
        # The rank directory's lock (writers/safe_fs.DumpLock) and the directories this window created.
        self._dump_lock = None  # type: Optional[DumpLock]
        self._created_dirs = []  # type: List[str]

    def claim(self, rank: int) -> None:
        """Create (or check: never a symlink) the tag and rank directories of ``rank`` and take the rank
        directory's lock: a second process writing there gets a DumpPathError naming the holder.
        ``set_dump_switch("ON")`` calls it when the rank is known then; else the first record does."""
        rank_dir = os.path.dirname(self.location.pkl_path(rank, self.config.mode))
        if self._dump_lock is not None:
            if self._dump_lock.directory == rank_dir:
                return
            self._release()
        created = own_dirs(rank_dir, 2)
        lock = DumpLock(rank_dir)
        try:
            lock.acquire()
        except BaseException:
            remove_empty_dirs(created)
            raise
        self._dump_lock, self._created_dirs = lock, created

    def _release(self) -> None:
        lock, self._dump_lock = self._dump_lock, None
        if lock is not None:
            lock.release()
            remove_empty_dirs(self._created_dirs)  # a window that wrote nothing leaves nothing behind
            self._created_dirs = []

    # -- selection -----------------------------------------------------------------------------
    def _selected(self, call: ApiCall, name: str) -> bool:
        if self._selects_all:
            return True
        matched = static_match(self.config, call.prefix, call.api, name)
        if matched is None:
            with self._lock:
                matched = self.range.step(name)
        return matched

    def wants_forward(self, call: ApiCall) -> bool:
        # Every top-level call, recorded or not, ages the statistics cache: anything may change a tensor.
        self._statistics.advance()
        # The range must see every forward event, even when only backward data is dumped.
        return self._selected(call, call.forward_name) and self._forward

    def wants_backward(self, call: ApiCall) -> bool:
        if not self._backward or call.prefix == "Distributed":
            return False
        if self.range is not None:
            return True  # decided when the backward event happens, in time order
        return self._selected(call, call.backward_name)

    # -- recording -----------------------------------------------------------------------------
    def before_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> None:
        # An in-place call (add_, out=, a collective...): its inputs as they go in. Their statistics and
        # npy copies are taken now and written with the outputs after the call, in the same lines.
        if self._inputs:
            records = input_records(call.forward_name, args, kwargs, self._filter)
            if records:
                with self._lock:
                    writer = self._writer or self._open((args, kwargs))
                    call.keep(self, writer.prepare(records, self._statistics.lookup))

    def forward_failed(self, call: ApiCall) -> None:
        # The cache names the inputs taken in before_forward, whose records are never written: a later
        # record must not link its npy to them.
        with self._lock:
            self._statistics.clear()

    def on_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any) -> None:
        name = call.forward_name
        if call.inplace:  # the inputs were taken in before_forward
            if call.prefix == "Distributed":
                # A collective's outputs are the arguments it wrote into, recorded as the original tool did.
                output = collective_outputs(args, kwargs)
            records = output_records(name, output, self._filter) if self._outputs else []
            self._write(name, records, (args, kwargs, output), call.kept(self))
            return
        records = input_records(name, args, kwargs, self._filter) if self._inputs else []
        if self._outputs:
            records.extend(output_records(name, output, self._filter))
        self._write(name, records, (args, kwargs, output))

    def on_backward(self, call: ApiCall, backward_input: Sequence[Optional[Any]],
                    backward_output: Sequence[Optional[Any]]) -> None:
        name = call.backward_name
        if self.range is not None and not self._selected(call, name):
            return
        self._statistics.advance()
        records = gradient_records(name, "input", backward_input, self._filter) if self._inputs else []
        if self._outputs:
            records.extend(gradient_records(name, "output", backward_output, self._filter))
        self._write(name, records, (backward_input, backward_output))

    def _write(self, call_name: str, records: List[Tuple[str, Any]], sample: Any, before: Any = None) -> None:
        """Write one call's records and its stack line (after ``before``, the records an in-place call's
        before_forward prepared)."""
        stack_line = user_stack_json(call_name + STACK_SUFFIX, 2) if self._stack else None
        with self._lock:
            writer = self._writer or self._open(sample)
            self.matched += 1
            if call_name.startswith("Distributed_"):
                self._statistics.clear()  # collectives write in place without bumping version counters
            # The cache reduces (and saves) a tensor once while it is seen unchanged.
            writer.write_call(records, stack_line, self._statistics.lookup, before)

    def _open(self, sample: Any) -> LegacyPklWriter:
        rank = self.session.resolve_rank(self.rank, tensors_in(sample)[:1])
        self.rank = rank
        self.claim(rank)
        pkl_path = self.location.pkl_path(rank, self.config.mode)
        npy_dir = pkl_path[: -len(".pkl")] if self.config.writes_npy else None
        fresh = pkl_path not in self.session.opened_files
        self._statistics.clear()
        # Lines alone are cheap to write in place; a writer thread would only fight the training thread
        # for the GIL. Tensor files go to the background thread.
        background = BackgroundWriter() if npy_dir is not None else None
        self._writer = LegacyPklWriter(pkl_path, npy_dir, background=background, own_background=True, fresh=fresh,
                                       own_levels=2)
        self.session.opened_files.add(pkl_path)
        return self._writer

    @property
    def pkl_path(self) -> Optional[str]:
        """The pkl this window writes (None until the first record)."""
        return self._writer.pkl_path if self._writer is not None else None

    @property
    def writer_busy_seconds(self) -> float:
        """Seconds this window's writer thread has spent writing so far (0.0 without npy files)."""
        return self._writer.background_busy_seconds if self._writer is not None else 0.0

    def flush(self) -> None:
        """Wait until everything recorded so far is on disk."""
        with self._lock:
            if self._writer is not None:
                self._writer.flush()

    def close(self) -> None:
        with self._lock:
            writer, self._writer = self._writer, None
        try:
            if writer is not None:
                writer.close()
                logger.info("Dump data of this window is in {}.".format(writer.pkl_path))
        finally:
            self._release()
        if self.matched == 0 and not self._selects_all:
            selection = ("api_list={}".format(list(self.config.api_list)) if self.config.mode == "api_list"
                         else "scope={}".format(list(self.config.scope)))
            logger.warning("No call matched {} (mode {!r}) in this dump window: nothing was dumped.".format(
                selection, self.config.mode))
