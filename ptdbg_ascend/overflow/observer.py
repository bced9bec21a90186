"""The observer of the legacy overflow check (``register_hook(model, overflow_check)``): it checks
each recorded call, dumps the ones that overflow, stops at the limit. What an overflow is lives in
``overflow/detection.py``, which calls are dumped and when training stops in ``overflow/policy.py``.

Per overflowing call it writes, in the rank directory of the dump path::

    Overflow_info_{UTC %Y%m%d_%H%M%S}_{k}.pkl     the stack line first, then every record (dump_step 101)
    Overflow_info_{UTC %Y%m%d_%H%M%S}_{k}/        one npy per tensor record

Forward calls are checked on their outputs (collectives such as all_reduce on the arguments they
wrote), backward calls on the gradients they produce (the gradients w.r.t. their inputs,
``backward_output``). Records are named as in a dump: a forward call's
inputs ``{name}_input.i`` and outputs ``{name}_output``; a backward call's incoming gradients
``{name}_input.i`` and produced gradients ``{name}_output.i``.

Which calls are dumped and when training stops is the one overflow policy of both front-ends
(``overflow/policy.py``): on CPU each check is answered at once; on CUDA/NPU the flags stay on the
device and are read ``policy.PENDING_CALLS`` at a time, at switch OFF and at exit, so the overflow pkl of
a pending call holds the tensors as they are when the batch is read (a warning names any tensor that
was changed in place since the call). The stop is :class:`~ptdbg_ascend.errors.OverflowLimitReached`,
a ValueError as in the original tool.

The first overflow dump takes the rank directory's lock (``fs/locks.DumpLock``, as a dump
window does) and keeps it until the check is closed: a second process overflow-dumping into the same
rank directory gets a DumpPathError naming the holder. It is released when the limit stops training.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.dump.capture import gradient_records, input_records, output_records, tensors_in
from ptdbg_ascend.dump.observers import ApiCall, CallObserver
from ptdbg_ascend.dump.stack import user_stack_json
from ptdbg_ascend.log import logger
from ptdbg_ascend.formats import layout
from ptdbg_ascend.formats.naming import STACK_SUFFIX
from ptdbg_ascend.formats.pkl import OVERFLOW_DUMP_STEP
from ptdbg_ascend.overflow.detection import FloatStatus, overflow_flag, read_flags
from ptdbg_ascend.overflow.policy import OverflowPolicy
from ptdbg_ascend.fs.locks import RankDirectoryClaim


class PendingCall(NamedTuple):
    """A checked call whose device flag is not read yet."""

    name: str
    records: List[Tuple[str, Any]]
    versions: Tuple[int, ...]
    stack_line: str
    rerun: Optional[Callable[[], None]]


class OverflowPlace(NamedTuple):
    """Where overflow files go: ``{directory}/{tag}_v{version}/rank{R}/``."""

    directory: str
    tag: str
    version: str

    def rank_dir(self, rank: int) -> str:
        return layout.legacy_rank_dir(self.directory, self.tag, self.version, rank)


class OverflowObserver(CallObserver):
    """Checks every top-level call while active (from registration, or between ON and OFF).

    Args:
        session: the DumpSession (rank resolution).
        overflow_nums: stop (OverflowLimitReached, a ValueError) at this overflow; -1 never stops.
        place: a function returning the :class:`OverflowPlace`; called at the first overflow so that a
            ``set_dump_path`` made after ``register_hook`` is honoured.
        rank: ``register_hook(rank=)``; None resolves it from the first overflowing call.
        float_status: the NPU float status (torch_npu without inf/nan support); None checks values.
        acl_rerun: for ``dump_mode="acl"``: ``acl_rerun(call, args, kwargs)`` re-runs an overflowing
            forward call under ACL dump. Checks are then answered at once (never pending), since the
            re-run needs the arguments as they were.
        defer_device_flags: keep device flags pending (see the module docstring). Default True.
    """

    def __init__(self, session: Any, overflow_nums: int, place: Callable[[], OverflowPlace],
                 rank: Optional[int] = None, float_status: Optional[FloatStatus] = None,
                 acl_rerun: Optional[Callable[[ApiCall, Any, Any], None]] = None,
                 defer_device_flags: bool = True) -> None:
        self.session = session
        self.overflow_nums = overflow_nums
        self.place = place
        self.rank = rank
        self.float_status = float_status
        self.acl_rerun = acl_rerun
        self.active = True
        self.filter_switch = True
        # ``read`` looks the module's read_flags up at each read (tests count the reads through it).
        self.policy = OverflowPolicy(overflow_nums, self._dump, self._stopping,
                                     defer=defer_device_flags and acl_rerun is None and float_status is None,
                                     read=lambda flags: read_flags(flags))
        # The rank directory's lock, taken at the first overflow dump, and the directories it created.
        self._rank_dir = RankDirectoryClaim()
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        """Overflows dumped so far."""
        return self.policy.count

    @property
    def stopped(self) -> bool:
        """Whether the limit was reached (nothing more is checked)."""
        return self.policy.stopped

    # -- switch --------------------------------------------------------------------------------
    def switch_on(self, filter_switch: bool) -> None:
        self.active = True
        self.filter_switch = filter_switch

    def switch_off(self) -> None:
        """Stop checking; pending calls are read now (this may raise OverflowLimitReached)."""
        self.active = False
        self.flush()

    # -- observer ------------------------------------------------------------------------------
    def wants_forward(self, call: ApiCall) -> bool:
        return self.active and not self.stopped

    def wants_backward(self, call: ApiCall) -> bool:
        return self.active and not self.stopped and call.prefix != "Distributed"

    def on_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Any, output: Any) -> None:
        # A collective's output is what it wrote into its arguments (dispatch hands it over): checked and
        # recorded alone, its inputs are the same tensors.
        flag = self._check(output)
        if flag is False:
            return
        records = [] if call.prefix == "Distributed" else input_records(call.forward_name, args, kwargs, self.filter_switch)
        records.extend(output_records(call.forward_name, output, self.filter_switch))
        rerun: Optional[Callable[[], None]] = None
        if self.acl_rerun is not None and call.prefix != "Distributed":  # a collective re-run on one rank would hang
            rerun = functools.partial(self.acl_rerun, call, args, kwargs)
        self._handle(call.forward_name, flag, records, rerun)

    def on_backward(self, call: ApiCall, backward_input: Sequence[Optional[Any]],
                    backward_output: Sequence[Optional[Any]]) -> None:
        if not self.active or self.stopped:
            return
        flag = self._check(list(backward_output))
        if flag is False:
            return
        records = gradient_records(call.backward_name, "input", backward_input, self.filter_switch)
        records.extend(gradient_records(call.backward_name, "output", backward_output, self.filter_switch))
        rerun: Optional[Callable[[], None]] = None
        if self.acl_rerun is not None:  # a backward cannot be re-run from here: say how to dump it
            rerun = functools.partial(logger.info, "The overflow is caused by backward operator {}. You can use reverse "
                                      "acl dump(mode='acl') to get operator dump data.".format(call.backward_name))
        self._handle(call.backward_name, flag, records, rerun)

    def close(self) -> None:
        """Read the pending calls and write their dumps; the limit is reported, not raised (exit path).
        Releases the rank directory's lock."""
        try:
            self.flush()
        except ValueError as error:  # OverflowLimitReached, or a DumpPathError of a late overflow dump
            logger.error(str(error))
        finally:
            self._release()

    # -- checking and dumping ------------------------------------------------------------------
    def _check(self, value: Any) -> Any:
        if self.float_status is not None:
            overflowed = self.float_status.overflowed()
            if overflowed:
                self.float_status.clear()
            return overflowed
        return overflow_flag(value)

    def _handle(self, name: str, flag: Any, records: List[Tuple[str, Any]], rerun: Optional[Callable[[], None]]) -> None:
        stack_line = user_stack_json(name + STACK_SUFFIX, 2)
        versions = tuple(value._version for _, value in records if hasattr(value, "_version"))
        self.policy.check(flag, PendingCall(name, records, versions, stack_line, rerun))

    def flush(self) -> None:
        """Read every pending device flag (one sync per device) and dump the calls that overflowed."""
        self.policy.flush()

    def _claim(self, rank_dir: str) -> None:
        """Create (or check) the tag and rank directories and take the rank directory's lock, as a dump
        window does (``LegacyRecorder.claim``): a second process gets a DumpPathError naming the holder."""
        with self._lock:
            self._rank_dir.claim(rank_dir)

    def _release(self) -> None:
        with self._lock:
            self._rank_dir.release()

    def _dump(self, entry: PendingCall, k: int) -> str:
        """Write overflow number ``k`` (the policy's ``dump``); returns its pkl path."""
        from ptdbg_ascend.sinks.legacy.pkl_writer import LegacyPklWriter

        current = tuple(value._version for _, value in entry.records if hasattr(value, "_version"))
        if current != entry.versions:
            logger.warning("A tensor of {} was changed in place between the call and the overflow check; the "
                           "overflow dump holds its values at the time of the check.".format(entry.name))
        rank = self.session.resolve_rank(self.rank, tensors_in([value for _, value in entry.records])[:1])
        self.rank = rank
        rank_dir = self.place().rank_dir(rank)  # may raise DumpPathError: then this overflow is not counted
        self._claim(rank_dir)  # likewise (another process holds the rank directory)
        pkl_path, stem = _new_overflow_file(rank_dir, k)
        writer = LegacyPklWriter(pkl_path, os.path.join(rank_dir, stem), dump_step=OVERFLOW_DUMP_STEP, fresh=True,
                                 own_levels=0)  # _claim() created and checked the rank directory
        try:
            writer.write_call([], stack_line=entry.stack_line)  # the stack line first, as the original did
            writer.write_call(entry.records)
        finally:
            writer.close()
        logger.warning("[overflow {} times]: module name :'{}' is overflow and dump file is saved in '{}'."
                       .format(k, entry.name, pkl_path))
        if entry.rerun is not None:
            entry.rerun()
            if self.float_status is not None:
                self.float_status.clear()  # the re-run raised the status again: not a new overflow
        return pkl_path

    def _stopping(self, count: int, pkl_path: str) -> str:
        """The limit is reached (the policy's ``stop_message``): nothing more is written, so the rank
        directory is released now (the script may catch the stop and go on)."""
        self._release()
        return f"[overflow {count} times]: dump file is saved in '{pkl_path}'."


def _new_overflow_file(rank_dir: str, k: int) -> Tuple[str, str]:
    """``(absolute pkl path, stem)`` of overflow ``k``: ``Overflow_info_{UTC YYYYmmdd_HHMMSS}_{k}``. A check
    registered again in the same second restarts k; the second such file then gets microseconds in
    its timestamp (``..._HHMMSS_ffffff_{k}``) rather than overwriting the first."""
    now = time.time()
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(now))
    stem = layout.overflow_stem(stamp, k)
    if os.path.exists(layout.pkl_file(rank_dir, stem)):
        stem = layout.overflow_stem(stamp, k, int((now % 1) * 1e6))
    return os.path.abspath(layout.pkl_file(rank_dir, stem)), stem
