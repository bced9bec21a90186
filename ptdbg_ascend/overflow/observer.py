"""The overflow observer: checks each recorded call, dumps the ones that overflow, stops at the limit.

Per overflowing call it writes, in the rank directory of the dump path::

    Overflow_info_{UTC %Y%m%d_%H%M%S}_{k}.pkl     the stack line first, then every record (dump_step 101)
    Overflow_info_{UTC %Y%m%d_%H%M%S}_{k}/        one npy per tensor record

Forward calls are checked on their outputs (collectives such as all_reduce on the arguments they
wrote), backward calls on the gradients they produce (the gradients w.r.t. their inputs,
``backward_output``). Records are named as in a dump: a forward call's
inputs ``{name}_input.i`` and outputs ``{name}_output``; a backward call's incoming gradients
``{name}_input.i`` and produced gradients ``{name}_output.i``.

On CPU each check is answered at once. On CUDA/NPU the check stays on the device and the calls are
kept pending (their records, stack and device flag) until :data:`PENDING_CALLS` calls have
accumulated, the switch goes OFF or the process ends; then all flags are read with one host sync.
The overflow pkl of a pending call therefore holds the tensors as they are when the batch is read
(a warning names any tensor that was changed in place since the call), and the stop comes at most
that many calls after the overflowing one.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

from ptdbg_ascend.dump.capture import collective_outputs, gradient_records, input_records, output_records, tensors_in
from ptdbg_ascend.dump.observers import ApiCall, CallObserver
from ptdbg_ascend.dump.stack import user_stack_json
from ptdbg_ascend.log import logger
from ptdbg_ascend.naming import STACK_SUFFIX
from ptdbg_ascend.overflow.detection import FloatStatus, overflow_flag, read_flags

OVERFLOW_DUMP_STEP = 101  # the legacy marker of overflow records (compare skips their statistics)
PENDING_CALLS = 32  # device flags read per host sync; also the most calls a stop can lag behind
UNLIMITED = -1


class PendingCall(NamedTuple):
    """A checked call whose device flag is not read yet."""

    name: str
    flag: Any
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
        return os.path.join(self.directory, "{}_v{}".format(self.tag, self.version), "rank{}".format(rank))


class OverflowObserver(CallObserver):
    """Checks every top-level call while active (from registration, or between ON and OFF).

    Args:
        session: the DumpSession (rank resolution).
        overflow_nums: stop (ValueError) at this overflow; -1 never stops.
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
        self.defer = defer_device_flags and acl_rerun is None and float_status is None
        self.active = True
        self.filter_switch = True
        self.count = 0
        self.stopped = False
        self._pending = []  # type: List[PendingCall]
        self._lock = threading.RLock()  # backward checks may run on autograd's device threads

    # -- switch --------------------------------------------------------------------------------
    def switch_on(self, filter_switch: bool) -> None:
        self.active = True
        self.filter_switch = filter_switch

    def switch_off(self) -> None:
        """Stop checking; pending calls are read now (this may raise the overflow-limit ValueError)."""
        self.active = False
        self.flush()

    # -- observer ------------------------------------------------------------------------------
    def wants_forward(self, call: ApiCall) -> bool:
        return self.active and not self.stopped

    def wants_backward(self, call: ApiCall) -> bool:
        return self.active and not self.stopped and call.prefix != "Distributed"

    def on_forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Any, output: Any) -> None:
        if call.prefix == "Distributed":
            # Collectives write their result into their arguments (all_reduce): those are the outputs,
            # recorded as the dump records them.
            output = collective_outputs(args, kwargs)
            flag = self._check(output)
            if flag is False:
                return
            records = output_records(call.forward_name, output, self.filter_switch)
        else:
            flag = self._check(output)
            if flag is False:
                return
            records = input_records(call.forward_name, args, kwargs, self.filter_switch)
            records.extend(output_records(call.forward_name, output, self.filter_switch))
        rerun = None  # type: Optional[Callable[[], None]]
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
        rerun = None  # type: Optional[Callable[[], None]]
        if self.acl_rerun is not None:  # a backward cannot be re-run from here: say how to dump it
            rerun = functools.partial(logger.info, "The overflow is caused by backward operator {}. You can use reverse "
                                      "acl dump(mode='acl') to get operator dump data.".format(call.backward_name))
        self._handle(call.backward_name, flag, records, rerun)

    def close(self) -> None:
        """Read the pending calls and write their dumps; the limit is reported, not raised (exit path)."""
        try:
            self.flush()
        except ValueError as error:
            logger.error(str(error))

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
        entry = PendingCall(name, flag, records, versions, stack_line, rerun)
        with self._lock:
            if flag is True:
                self._flush_locked()  # keep the overflows in call order
                self._dump(entry)
                return
            if not self.defer:
                if read_flags([flag])[0]:
                    self._flush_locked()
                    self._dump(entry)
                return
            self._pending.append(entry)
            if len(self._pending) >= PENDING_CALLS:
                self._flush_locked()

    def flush(self) -> None:
        """Read every pending device flag (one sync per device) and dump the calls that overflowed."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        for entry, overflowed in zip(pending, read_flags([entry.flag for entry in pending])):
            if overflowed and not self.stopped:
                self._dump(entry)

    def _dump(self, entry: PendingCall) -> None:
        from ptdbg_ascend.writers.legacy_pkl import LegacyPklWriter

        current = tuple(value._version for _, value in entry.records if hasattr(value, "_version"))
        if current != entry.versions:
            logger.warning("A tensor of {} was changed in place between the call and the overflow check; the "
                           "overflow dump holds its values at the time of the check.".format(entry.name))
        rank = self.session.resolve_rank(self.rank, tensors_in([value for _, value in entry.records])[:1])
        self.rank = rank
        rank_dir = self.place().rank_dir(rank)  # may raise DumpPathError: then this overflow is not counted
        self.count += 1
        pkl_path, stem = _new_overflow_file(rank_dir, self.count)
        writer = LegacyPklWriter(pkl_path, os.path.join(rank_dir, stem), dump_step=OVERFLOW_DUMP_STEP, fresh=True)
        try:
            writer.write_call([], stack_line=entry.stack_line)  # the stack line first, as the original did
            writer.write_call(entry.records)
        finally:
            writer.close()
        logger.warning("[overflow {} times]: module name :'{}' is overflow and dump file is saved in '{}'."
                       .format(self.count, entry.name, pkl_path))
        if entry.rerun is not None:
            entry.rerun()
            if self.float_status is not None:
                self.float_status.clear()  # the re-run raised the status again: not a new overflow
        if self.overflow_nums != UNLIMITED and self.count >= self.overflow_nums:
            self.stopped = True
            self._pending = []
            raise ValueError("[overflow {} times]: dump file is saved in '{}'.".format(self.count, pkl_path))


def _new_overflow_file(rank_dir: str, k: int) -> Tuple[str, str]:
    """``(absolute pkl path, stem)`` of overflow ``k``: ``Overflow_info_{UTC YYYYmmdd_HHMMSS}_{k}``. A check
    registered again in the same second restarts k; the second such file then gets microseconds in
    its timestamp (``..._HHMMSS_ffffff_{k}``) rather than overwriting the first."""
    now = time.time()
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(now))
    stem = "Overflow_info_{}_{}".format(stamp, k)
    if os.path.exists(os.path.join(rank_dir, stem + ".pkl")):
        stem = "Overflow_info_{}_{:06d}_{}".format(stamp, int((now % 1) * 1e6), k)
    return os.path.abspath(os.path.join(rank_dir, stem + ".pkl")), stem
