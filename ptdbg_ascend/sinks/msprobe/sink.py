"""The msprobe 1.0.4 format's sink: :class:`MsprobeSink` turns API calls and module calls
(``msprobe/modules.py``) into dump.json entries, stack.json lines and construct.json links, written through
the current step's :class:`~ptdbg_ascend.sinks.msprobe.json_writer.MsprobeJsonWriter`. The recorder that
owns it (selection + this sink) is ``msprobe/recording.MsprobeRecorder``, which gives it its
:class:`~ptdbg_ascend.sinks.msprobe.options.MsprobeSinkOptions`.

Task ``overflow_check`` uses the overflow policy of the legacy check (``overflow/policy.py``, given in the
options): a call is written only when its data overflow; device flags are read in batches (at the latest at
``stop()``, the end of the step and exit), and the ``overflow_nums``-th overflow raises
:class:`~ptdbg_ascend.errors.OverflowLimitReached`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ptdbg_ascend.dump.observers import ApiCall, dotted
from ptdbg_ascend.dump.recorder import RecordSink
from ptdbg_ascend.dump.stack import user_stack_literals
from ptdbg_ascend.formats.dump_json import AUTOCAST, NOT_SAVED
from ptdbg_ascend.formats.naming import BACKWARD, FORWARD
from ptdbg_ascend.log import logger
from ptdbg_ascend.memory import is_out_of_memory, out_of_memory_reason
from ptdbg_ascend.sinks.msprobe.autocast import autocast_state
from ptdbg_ascend.sinks.msprobe.encoder import BLOCK_LEVEL, Entry, EntryEncoder, TensorNotSaved
from ptdbg_ascend.sinks.msprobe.json_text import value_text
from ptdbg_ascend.sinks.msprobe.json_writer import MsprobeJsonWriter
from ptdbg_ascend.sinks.msprobe.leaves import TensorLeaf
from ptdbg_ascend.sinks.msprobe.options import MsprobeSinkOptions
from ptdbg_ascend.statistics.cache import StatisticsCache
from ptdbg_ascend.statistics.msprobe_rules import tensor_statistics_msprobe


class MsprobeSink(RecordSink):
    """Writes dump.json entries, stack.json lines and construct.json links through the current step's
    :class:`MsprobeJsonWriter`, each entry's text written by the one encoder (``encoder.py``). Statistics are
    read through the recorder's cache: a tensor recorded as one call's output and the next call's input,
    unchanged (same object, same version counter), is reduced once, as in the legacy format; which tensors'
    statistics come later is the writer's planner's choice.

    Args:
        options: what to write (the blocks of data_mode, md5, the overflow check).
        record_construct: whether construct.json is filled (levels L0 and mix).
        stopped: called when the overflow check stops training (the recorder turns itself off).
    """

    uses_statistics = True  # the recorder ages the cache once per call (dump/recorder.py)

    def __init__(self, options: MsprobeSinkOptions, record_construct: bool, stopped: Callable[[], None]) -> None:
        self.options = options
        self.record_construct = record_construct
        self.sees_events = record_construct  # construct.json links every call seen, selected or not
        self.writer: Optional[MsprobeJsonWriter] = None
        self.md5 = options.md5
        self.overflow_task = options.overflow is not None
        # The one overflow policy (msprobe 1.0.4 stopped with Exception("[msprobe] exit")).
        self.overflow = (options.overflow.policy(self._dump_overflow, self._stopping)
                         if options.overflow is not None else None)
        self._stopped = stopped
        # construct.json needs the module enclosing each call: the module hooks push and pop here.
        self.module_stack: List[str] = []
        self._forward_parent: Dict[str, Optional[str]] = {}
        self._encoder = EntryEncoder(md5=self.md5)
        self._cached: Optional[Callable[[Any, Callable[[Any], Any]], Any]] = None  # the cache, for late statistics
        self._not_saved: Set[str] = set()  # the stems of tensors whose copy ran out of memory

    def bind(self, statistics: StatisticsCache, lock: Any) -> None:
        super().bind(statistics, lock)

        def statistics_of(tensor: Any) -> List[Optional[float]]:
            with lock:  # backward hooks may run on autograd's threads
                return statistics.lookup(tensor, "", tensor_statistics_msprobe)[0]

        def cached(tensor: Any, reduce: Callable[[Any], Any]) -> Any:
            with lock:
                return statistics.lookup(tensor, "", reduce)[0]

        self._encoder = EntryEncoder(statistics_of, self.md5)
        self._cached = cached

    @property
    def overflows(self) -> int:
        return self.overflow.count if self.overflow is not None else 0

    def begin_step(self, writer: MsprobeJsonWriter) -> None:
        if self.overflow is not None:
            self.overflow.flush()  # calls still pending belong to the previous step's writer
        self.writer = writer
        late = writer.late
        late.cached = self._cached
        self._encoder.bind(self._save_tensor if writer.saves_tensors else None, late.takes_device, late.pending_of,
                           late.planner.cpu_eager)
        self._forward_parent.clear()
        self.module_stack = []
        self._not_saved = set()  # a new step's files: none is missing yet

    def close(self) -> None:
        """Write the JSON files of the current step (at stop() and at interpreter exit). overflow_check:
        the pending calls are read first, which may raise OverflowLimitReached (the files are still
        written)."""
        self._close("")

    def close_cut(self, why: str) -> None:
        """:meth:`close` at an exit that ends the process with the window on (``why``: an uncaught
        exception): the JSON files hold every call recorded, and the lock stays with ``why`` in it."""
        self._close(why)

    def _close(self, cut: str) -> None:
        try:
            if self.overflow is not None:
                self.overflow.flush()
        finally:
            writer = self.writer
            if self._not_saved:
                logger.warning("{} tensor{} of {} {} no .pt file: out of memory while copying them; their leaves in "
                               "dump.json keep dtype, shape and statistics and say why (\"{}\").".format(
                                   len(self._not_saved), "" if len(self._not_saved) == 1 else "s",
                                   writer.directory if writer is not None else "this step",
                                   "has" if len(self._not_saved) == 1 else "have", NOT_SAVED))
                self._not_saved = set()
            if writer is not None:
                try:
                    writer.flush()
                finally:
                    # the step/rank directory's lock (a later start() takes it again)
                    if writer.release(cut) and cut:
                        logger.warning("The dump {} ends cut short: {}. Its dump.json holds every call recorded "
                                       "until then; its .ptdbg.lock stays, so compare and parse name it as cut."
                                       .format(writer.directory, cut))

    # -- construct.json ----------------------------------------------------------------------------
    def parent_of(self, name: str) -> Optional[str]:
        """The enclosing module of a forward event now; for a backward event, the forward parent
        with forward -> backward (msprobe's rule)."""
        if ".backward" in name:
            forward_parent = self._forward_parent.get(name.replace(".backward", ".forward"))
            return forward_parent.replace(".forward", ".backward") if forward_parent else None
        parent = self.module_stack[-1] if self.module_stack else None
        self._forward_parent[name] = parent
        return parent

    def note_construct(self, name: str) -> None:
        if self.record_construct and self.writer is not None:
            self.writer.add_construct(name, self.parent_of(name))

    # -- the sink of API calls ---------------------------------------------------------------------
    def seen(self, call: ApiCall, direction: str) -> None:
        self.note_construct(dotted(call, direction))  # every call seen while on, even outside scope/list (as 1.0.4)

    def inputs_before(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        # An in-place call (add_, out=, a collective...): the inputs block as they go in (statistics now or
        # queued now, .pt copies queued now); the outputs are added after the call. overflow_check decides after
        # the call whether a call is written at all: there only collectives take their inputs here.
        if self.overflow_task and call.prefix != "Distributed":
            return None
        late: List[TensorLeaf] = []
        return _TextBlocks(self._input_blocks(dotted(call, FORWARD), args, kwargs, late), late)

    def forward(self, call: ApiCall, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any, before: Any,
                stack: bool) -> None:
        name = dotted(call, FORWARD)
        autocast = autocast_state(args, kwargs)  # now, at the call: the entry may be built later (overflow)
        outputs = _as_list(output)  # (an in-place collective's: the arguments it wrote into, a tuple from dispatch)

        def build() -> Entry:
            extra = [(AUTOCAST, value_text(autocast, BLOCK_LEVEL))] if autocast is not None else []
            return self._forward_entry(name, args, kwargs, outputs, before, extra)

        self.add_entry(name, build, stack=stack, values=(args, kwargs, output))

    def backward(self, call: ApiCall, backward_input: Sequence[Optional[Any]],
                 backward_output: Sequence[Optional[Any]], stack: bool) -> None:
        name = dotted(call, BACKWARD)
        self.add_entry(name, lambda: self.gradient_entry(name, backward_input, backward_output), stack=stack,
                       values=(backward_input, backward_output))

    # -- entries (shared with the module hooks) ------------------------------------------------------
    def forward_entry(self, name: str, args: Sequence[Any], kwargs: Dict[str, Any], output: Any) -> Entry:
        return self._forward_entry(name, args, kwargs, _as_list(output))

    def _forward_entry(self, name: str, args: Sequence[Any], kwargs: Dict[str, Any], outputs: List[Any],
                       before: Any = None, extra: Sequence[Tuple[str, str]] = ()) -> Entry:
        """A forward entry: the inputs (``before``: an in-place call's, taken before it ran), the outputs, then
        ``extra`` blocks already written (the autocast value)."""
        late = list(before.late) if before is not None else []
        blocks = list(before) if before is not None else self._input_blocks(name, args, kwargs, late)
        if self.options.wanted(FORWARD, "output"):
            blocks.append(("output", self._encoder.values_block(outputs, name + ".output", late)))
        blocks.extend(extra)
        return self._encoder.entry(name, blocks, late)

    def gradient_entry(self, name: str, incoming: Sequence[Optional[Any]], produced: Sequence[Optional[Any]]) -> Entry:
        late: List[TensorLeaf] = []
        encoder = self._encoder
        blocks = [(block, encoder.values_block(list(values), f"{name}.{block}", late))
                  for block, values in (("input", incoming), ("output", produced)) if self.options.wanted(BACKWARD, block)]
        return encoder.entry(name, blocks, late)

    def add_entry(self, name: str, build: Callable[[], Entry], stack: bool, values: Any = None) -> None:
        """Build and write an entry. overflow_check: only when ``values`` (everything the entry holds)
        overflow, by the overflow feature's check (inf/NaN, float16/bfloat16 saturation), decided by
        the overflow policy (possibly later, when a batch of device flags is read); the entry is then
        counted against ``overflow_nums``."""
        writer = self.writer
        if writer is None:
            return
        if self.overflow is not None:
            if self.overflow.stopped:
                return
            flag = self.options.overflow.flag(values)
            if flag is not False:  # the stack is taken now, at the call, even if the flag is read later
                self.overflow.check(flag, (writer, name, build, user_stack_literals(2) if stack else None))
            return
        writer.add_entry(name, build())
        if stack:
            writer.add_stack_literals(name, user_stack_literals(2))

    def _input_blocks(self, name: str, args: Sequence[Any], kwargs: Dict[str, Any],
                      late: List[TensorLeaf]) -> List[Tuple[str, str]]:
        """The input blocks; ``late`` collects the leaves whose statistics come later."""
        if not self.options.wanted(FORWARD, "input"):
            return []
        base = name + ".input"
        encoder = self._encoder
        return [("input_args", encoder.values_block(args, base, late)),
                ("input_kwargs", encoder.keywords_block(kwargs, base, late))]

    def _dump_overflow(self, item: Tuple[MsprobeJsonWriter, str, Callable[[], Entry], Any], k: int) -> str:
        """Write overflowing call number ``k`` (the overflow policy's ``dump``); returns its directory."""
        writer, name, build, stack_literals = item
        logger.warning(f"{name} overflows (inf, nan or saturation in its data).")
        writer.add_entry(name, build())
        if stack_literals is not None:
            writer.add_stack_literals(name, stack_literals)
        return writer.directory

    def _stopping(self, count: int, directory: str) -> str:
        """The ``overflow_nums``-th overflow (the policy's ``stop_message``): stop recording, write the files."""
        self._stopped()
        if self.writer is not None:
            self.writer.flush()
        return ("Overflow check stops training at overflow {} (overflow_nums={}); the overflowing calls are in {}."
                .format(count, self.options.overflow.limit, directory))

    def _save_tensor(self, stem: str, tensor: Any) -> Tuple[Optional[str], Any]:
        """The encoder's ``save``: (data_name, the statistics the writer thread reads from its copy, or None),
        through the recorder's cache, so a tensor saved for the last call or two and unchanged since is neither
        copied nor written again (a hard link to its first file), as in the legacy format. No memory for the
        copy: :class:`TensorNotSaved` (the leaf says why it has no file), said at the first of the window; a
        later record of that tensor is copied again, never linked to the file that was not written."""
        writer = self.writer
        with self.lock:  # backward hooks may run on autograd's threads
            statistics, same_as = self.statistics.saved(tensor, stem, writer.copy_statistics)
        if same_as is not None and same_as in self._not_saved:
            same_as = None
        try:
            return writer.save_tensor(stem, tensor, statistics, same_as), statistics
        except Exception as error:  # noqa: BLE001 - only a failed allocation is handled here
            if not is_out_of_memory(error):
                raise
            reason = out_of_memory_reason(error)
        if not self._not_saved:
            logger.warning("No .pt file for {}: {}. Its leaf in dump.json keeps dtype, shape and statistics and "
                           "says why (\"{}\"); the dump goes on.".format(stem, reason, NOT_SAVED))
        self._not_saved.add(stem)
        raise TensorNotSaved(reason)


class _TextBlocks(list):
    """An in-place call's input blocks as ``(key, text)`` pairs (``inputs_before``), and the late leaves their
    placeholders stand for (``late``)."""

    def __init__(self, blocks: List[Tuple[str, str]], late: List[TensorLeaf]) -> None:
        super().__init__(blocks)
        self.late = late


def _as_list(output: Any) -> List[Any]:
    """A tuple result is spread; anything else (a list too) is one item, as in 1.0.4."""
    return list(output) if isinstance(output, tuple) else [output]
