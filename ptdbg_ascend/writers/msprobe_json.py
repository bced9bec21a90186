"""The msprobe 1.0.4 dump format on disk: ``dump.json``, ``stack.json``, ``construct.json`` and
``dump_tensor_data/{data_name}.pt`` under one ``{dump_path}/step{N}/rank{R}/`` directory.

The writer is a formatter: it receives finished entries (dicts built by ``ptdbg_ascend.msprobe.leaves``)
and tensors, and owns nothing else. Layout and format follow ``reference/msprobe_1_0_4.md`` §5-6:

* top-level keys ``task, level, dump_data_dir, data`` in that order; ``indent=1``; NaN/inf as the bare
  tokens ``NaN``/``Infinity``/``-Infinity`` (what Python's ``json`` writes and reads);
* ``.pt`` files are ``torch.save`` of a detached contiguous copy, keeping device and dtype (bf16 stays
  bf16), written by a background thread; the copy is taken at once, so a later in-place update of the
  tensor (optimizer step) cannot change what is saved;
* files 0640, directories 0750.

Unlike 1.0.4 (its §12 quirk 3), :meth:`MsprobeJsonWriter.flush` rewrites the files with *every* entry
of the step so far, so a second start()/stop() window in the same step adds to the first instead of
wiping it. JSON files are replaced atomically (write to a temporary file, then rename): a crash leaves
the previous complete file, never half a JSON document.

While entries arrive, dump.json, stack.json and construct.json are also rewritten periodically with the
*finished* entries: at most once per ``max_delay`` seconds (default ``background.DEFAULT_MAX_DELAY``,
1 s: the legacy writer's backlog bound) and never sooner than ``REWRITE_COST_FACTOR`` (10) times the
last rewrite's duration after it (less the encoding of new entries, done once per entry anyway), so a
huge dump spends at most ~10 % of the time rewriting. An entry
is finished when every ``.pt`` file queued before it was added is on disk; an unfinished one is left
out (or kept at its last finished version), so dump.json never names a file not yet written. With a
writer thread the rewrite is one of its jobs; without one (no tensors) it runs at the ``add_entry``
that finds it due. A SIGKILL therefore loses at most the entries of about the last
``2 * max_delay`` seconds (plus the last rewrite's duration when it is long).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from ptdbg_ascend.dump.statistics import DeviceStatisticsBatch, PendingDeviceStatistics
from ptdbg_ascend.msprobe.leaves import deferred_reductions, fill_statistics, msprobe_reduced
from ptdbg_ascend.writers import background as background_module
from ptdbg_ascend.writers.background import BackgroundWriter
from ptdbg_ascend.writers.safe_fs import RankDirectoryClaim, own_dir, own_dirs, replace_file, write_all

TENSOR_DIR = "dump_tensor_data"
# Deferred statistics read back at once when this many wait (a bound on device memory between rewrites).
MAX_PENDING_STATISTICS = 65536
DUMP_FILE = "dump.json"
STACK_FILE = "stack.json"
CONSTRUCT_FILE = "construct.json"


def step_rank_dir(dump_path: str, step: int, rank: Optional[int]) -> str:
    """``{dump_path}/step{step}/rank{rank}``; ``rank`` None (no torch.distributed) gives plain ``rank``."""
    return os.path.join(dump_path, "step{}".format(step), "rank" if rank is None else "rank{}".format(rank))


# A periodic rewrite waits at least this many times the last one's duration after it: rewriting a
# dump.json of n entries is O(n), so on a huge dump the rewrites take at most ~1/(1 + factor) of the time.
REWRITE_COST_FACTOR = 10


def dump_json_text(task: str, level: str, dump_data_dir: Optional[str], data: Dict[str, Any],
                   encoded: Optional[Dict[str, str]] = None) -> str:
    """The dump.json document (keys in msprobe's order, indent 1, NaN/Infinity tokens): the same text as
    ``json.dumps(document, indent=1)``. ``encoded`` caches each entry's text between calls (an indented
    dump is encoded in pure Python, slowly: each entry is encoded once however often the file is rewritten)."""
    return _document_text(task, level, dump_data_dir, _object_text(data, encoded, 1))


def _document_text(task: str, level: str, dump_data_dir: Optional[str], data_text: str) -> str:
    head = json.dumps({"task": task, "level": level, "dump_data_dir": dump_data_dir}, indent=1)[:-2]
    return head + ',\n "data": ' + data_text + "\n}"


def _member_text(name: str, value: Any, depth: int) -> str:
    """One ``"name": value`` member of an object nested at ``depth``, as ``json.dumps(indent=1)`` writes it."""
    text = json.dumps(value, indent=1, allow_nan=True).replace("\n", "\n" + " " * (depth + 1))
    return "{}{}: {}".format(" " * (depth + 1), json.dumps(name), text)


def _members_object(members: List[str], depth: int) -> str:
    if not members:
        return "{}"
    return "{\n" + ",\n".join(members) + "\n" + " " * depth + "}"


def _encode_missing(items: Dict[str, Any], encoded: Dict[str, str], depth: int) -> float:
    """Fill ``encoded`` with the member texts of ``items`` it lacks; returns the seconds it took."""
    started = time.perf_counter()
    for name, value in items.items():
        if name not in encoded:
            encoded[name] = _member_text(name, value, depth)
    return time.perf_counter() - started


def _object_text(items: Dict[str, Any], encoded: Optional[Dict[str, str]], depth: int) -> str:
    """``json.dumps(items, indent=1)`` nested at ``depth``, reusing ``encoded[name]`` (the member text
    of ``name``; a cache is used at one depth only)."""
    cache = encoded if encoded is not None else {}
    members = []
    for name, value in items.items():
        text = cache.get(name)
        if text is None:
            text = cache[name] = _member_text(name, value, depth)
        members.append(text)
    return _members_object(members, depth)


class MsprobeJsonWriter(object):
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

    Attributes:
        rewrites: periodic rewrites done so far; ``rewrite_seconds``: the time they took.
    """

    def __init__(self, directory: str, task: str, level: str, saves_tensors: bool,
                 background: Optional[BackgroundWriter] = None, flush_every: Optional[int] = None,
                 max_delay: Optional[float] = None) -> None:
        self.directory = directory
        self.task = task
        self.level = level
        self.saves_tensors = saves_tensors
        self.tensor_dir = os.path.join(directory, TENSOR_DIR)
        self._background = background
        self._flush_every = flush_every
        self._max_delay = background_module.DEFAULT_MAX_DELAY if max_delay is None else max_delay
        self._data = {}  # type: Dict[str, Any]
        self._stack = {}  # type: Dict[str, List[str]]
        self._construct = {}  # type: Dict[str, Optional[str]]
        # Member texts, each encoded once however often a file is rewritten (pure-Python indent=1
        # encoding is slow); dump.json's hold finished versions only.
        self._encoded = {}  # type: Dict[str, str]
        self._stack_encoded = {}  # type: Dict[str, str]
        self._construct_encoded = {}  # type: Dict[str, str]
        self._unflushed = 0
        self._made_dirs = False
        self._rank_dir = RankDirectoryClaim()  # step/rank directories and their lock
        self._lock = threading.Lock()  # backward hooks may run on autograd's threads
        # Which entries are finished. ``.pt`` jobs are numbered as queued (``_queued``, under
        # ``_submit_lock`` so numbers follow the queue's order); the writer thread runs them in order, so
        # ``_written`` (the number of the last one written) says that all before it are on disk. An entry
        # that may still wait for a file is in ``_ready_at`` (name -> ``_queued`` when it last changed);
        # ``_previous`` keeps the member text of the finished version of an entry extended since.
        self._submit_lock = threading.Lock()
        self._queued = 0
        self._written = 0
        self._write_failed = False  # after a failed .pt write nothing counts as finished any more
        self._ready_at = {}  # type: Dict[str, int]
        self._previous = {}  # type: Dict[str, str]
        # One rewrite at a time, so the files never go back to an older state.
        self._rewrite_lock = threading.Lock()
        self._rewrite_queued = False
        self._next_rewrite = time.monotonic() + self._max_delay
        self._earliest_rewrite = 0.0  # REWRITE_COST_FACTOR x the last rewrite's duration after its end
        self.rewrites = 0
        self.rewrite_seconds = 0.0
        # Statistics of tensors off the CPU, read back in batches (dump/statistics.DeviceStatisticsBatch)
        # when the files are rewritten: leaves deferred since the last add_entry (``_new_deferred``), and
        # per entry the leaves still waiting (such an entry is not finished: it is left out of dump.json,
        # or shown at its last finished version, like one waiting for a .pt file).
        self.statistics_batch = DeviceStatisticsBatch()
        self._new_deferred = []  # type: List[Tuple[Dict[str, Any], Any]]
        self._stat_waiting = {}  # type: Dict[str, List[Tuple[Dict[str, Any], Any]]]

    # -- adding ----------------------------------------------------------------------------------
    def add_entry(self, name: str, entry: Dict[str, Any]) -> None:
        """Add (or extend: an in-place collective's output arrives after its input) the entry ``name``.
        May rewrite the JSON files (see the module docstring)."""
        with self._lock:
            queued = self._queued
            waiting = queued > self._written
            deferred, self._new_deferred = self._new_deferred, []
            if deferred:
                self._stat_waiting.setdefault(name, []).extend(deferred)
            if name in self._data:
                self._data[name].update(entry)
                old = self._encoded.pop(name, None)
                if (waiting or deferred) and old is not None:  # _encoded holds finished versions only
                    self._previous[name] = old
            else:
                self._data[name] = entry
            if waiting:
                self._ready_at[name] = queued
            self._unflushed += 1
            due = self._rewrite_due()
        if due:
            self._start_rewrite()

    def defer_leaf(self, leaf: Dict[str, Any], tensor: Any) -> bool:
        """``msprobe.leaves.tensor_leaf``'s hook: queue the statistics of ``tensor`` (off the CPU) on its
        device; ``leaf`` is filled when they are read back (at the next rewrite or flush: one host sync
        per device for all of them, instead of one per tensor). Always True (taken over)."""
        batch = self.statistics_batch
        pending = batch.add(msprobe_reduced(tensor), extra=deferred_reductions)
        if type(pending) is not PendingDeviceStatistics:  # nothing to read back (no values)
            fill_statistics(leaf, pending)
            return True
        with self._lock:
            self._new_deferred.append((leaf, pending))
        if batch.pending_count() >= MAX_PENDING_STATISTICS:  # bounded: read back now
            batch.resolve()
        return True

    def add_stack(self, name: str, lines: List[str]) -> None:
        """stack.json entry ``name`` -> its formatted frames."""
        with self._lock:
            self._stack[name] = lines
            self._stack_encoded.pop(name, None)

    def add_construct(self, name: str, parent: Optional[str]) -> None:
        """construct.json entry ``name`` -> its parent module's name (None at top level)."""
        with self._lock:
            self._construct[name] = parent
            self._construct_encoded.pop(name, None)

    def save_tensor(self, stem: str, tensor: Any) -> Optional[str]:
        """Queue ``{tensor_dir}/{stem}.pt`` and return its data_name; None when tensors are not saved."""
        if not self.saves_tensors:
            return None
        import torch

        self._make_dirs()
        data_name = stem + ".pt"
        path = os.path.join(self.tensor_dir, data_name)
        with torch.no_grad():
            # clone(): the saved value is the one at call time, whatever the training loop does next.
            copy = tensor.detach().clone(memory_format=torch.contiguous_format)
        nbytes = copy.numel() * copy.element_size()
        with self._submit_lock:
            self._queued += 1
            number = self._queued

            def job() -> None:
                if self._write_failed:  # never referenced: an earlier file is missing
                    return
                try:
                    _save_pt(path, copy)
                except BaseException:
                    self._write_failed = True
                    raise
                self._written = number

            if self._background is None:
                job()
            else:
                self._background.submit(job, nbytes)
        return data_name

    # -- writing ---------------------------------------------------------------------------------
    def flush(self, json_only: bool = False) -> None:
        """Rewrite dump.json (and, unless ``json_only``, stack.json and construct.json) with every entry
        so far; waits for queued ``.pt`` files first, so dump.json never names a file not yet written."""
        if self._background is not None:
            self._background.flush()
        self._rewrite(with_others=not json_only, periodic=False)

    def _rewrite_due(self) -> bool:
        """Whether a periodic rewrite starts now (called under ``_lock``; marks it queued)."""
        if self._rewrite_queued:
            return False
        now = time.monotonic()
        if now < self._next_rewrite and not (self._flush_every and self._unflushed >= self._flush_every):
            return False
        if now < self._earliest_rewrite:  # flush_every too waits out the cost floor
            return False
        self._rewrite_queued = True
        return True

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
                self._rewrite_queued = False
            raise

    def _periodic_rewrite(self) -> None:
        try:
            self._rewrite(with_others=True, periodic=True)
        finally:
            with self._lock:
                self._rewrite_queued = False

    def _rewrite(self, with_others: bool, periodic: bool) -> None:
        """Replace dump.json (and stack.json, construct.json) with the finished entries so far."""
        self._make_dirs()
        with self._rewrite_lock:
            started = time.monotonic()
            encoding = 0.0
            try:
                self.statistics_batch.resolve()  # outside _lock: the training thread keeps adding entries
                with self._lock:
                    data_text, encoding = self._finished_data_text()
                    text = _document_text(self.task, self.level, self.tensor_dir if self.saves_tensors else None,
                                          data_text)
                    if with_others:
                        encoding += _encode_missing(self._stack, self._stack_encoded, 0)
                        encoding += _encode_missing(self._construct, self._construct_encoded, 0)
                        stack_text = _object_text(self._stack, self._stack_encoded, 0)
                        construct_text = _object_text(self._construct, self._construct_encoded, 0)
                    self._unflushed = 0
                _write_atomic(os.path.join(self.directory, DUMP_FILE), text)
                if with_others:
                    _write_atomic(os.path.join(self.directory, STACK_FILE), stack_text)
                    _write_atomic(os.path.join(self.directory, CONSTRUCT_FILE), construct_text)
            finally:
                ended = time.monotonic()
                with self._lock:
                    # The cost floor counts what a rewrite repeats (joining and writing every entry), not
                    # the encoding of new entries: that is done once per entry, rewrites or not.
                    self._earliest_rewrite = ended + REWRITE_COST_FACTOR * max(0.0, ended - started - encoding)
                    self._next_rewrite = max(ended + self._max_delay, self._earliest_rewrite)
                    if periodic:
                        self.rewrites += 1
                        self.rewrite_seconds += ended - started

    def _finished_data_text(self) -> Tuple[str, float]:
        """dump.json's ``data`` object of the finished entries (under ``_lock``): an entry waiting for a
        file is left out, or shown at its last finished version. Also returns the seconds spent encoding
        entries not encoded before."""
        ready_at = self._ready_at
        stat_waiting = self._stat_waiting
        if stat_waiting:
            for name in [name for name, items in stat_waiting.items() if all(p.values is None for _, p in items)]:
                for leaf, pending in stat_waiting.pop(name):
                    fill_statistics(leaf, list(pending))
                if name not in ready_at:
                    self._previous.pop(name, None)
        if ready_at:
            written = -1 if self._write_failed else self._written
            for name in [name for name, number in ready_at.items() if number <= written]:
                del ready_at[name]
                if name not in stat_waiting:
                    self._previous.pop(name, None)
        encoded = self._encoded
        previous = self._previous
        members = []
        encoding = 0.0
        for name, entry in self._data.items():
            if name in ready_at or name in stat_waiting:
                text = previous.get(name)
                if text is None:
                    continue
            else:
                text = encoded.get(name)
                if text is None:
                    before = time.perf_counter()
                    text = encoded[name] = _member_text(name, entry, 1)
                    encoding += time.perf_counter() - before
            members.append(text)
        return _members_object(members, 1), encoding

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
        process writing the same step/rank directory gets a DumpPathError naming the holder."""
        self._rank_dir.claim(self.directory)
        self._make_dirs()

    def release(self) -> None:
        """Give the lock back (stop(), exit). Idempotent."""
        self._rank_dir.release()


def _save_pt(path: str, tensor: Any) -> None:
    import torch

    def write(descriptor: int) -> None:
        with os.fdopen(os.dup(descriptor), "wb") as handle:
            torch.save(tensor, handle)

    replace_file(path, write, "the tensor file")


def _write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`~ptdbg_ascend.writers.safe_fs.replace_file`)."""
    replace_file(path, lambda descriptor: write_all(descriptor, text.encode("utf-8")))
