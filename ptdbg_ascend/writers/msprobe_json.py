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
the previous complete file, never half a JSON document. ``dump.json`` is also flushed every
``flush_every`` new entries.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, List, Optional

from ptdbg_ascend.writers.background import BackgroundWriter
from ptdbg_ascend.writers.safe_fs import DumpLock, own_dir, own_dirs, replace_file, write_all

TENSOR_DIR = "dump_tensor_data"
DUMP_FILE = "dump.json"
STACK_FILE = "stack.json"
CONSTRUCT_FILE = "construct.json"


def step_rank_dir(dump_path: str, step: int, rank: Optional[int]) -> str:
    """``{dump_path}/step{step}/rank{rank}``; ``rank`` None (no torch.distributed) gives plain ``rank``."""
    return os.path.join(dump_path, "step{}".format(step), "rank" if rank is None else "rank{}".format(rank))


def dump_json_text(task: str, level: str, dump_data_dir: Optional[str], data: Dict[str, Any],
                   encoded: Optional[Dict[str, str]] = None) -> str:
    """The dump.json document (keys in msprobe's order, indent 1, NaN/Infinity tokens): the same text as
    ``json.dumps(document, indent=1)``. ``encoded`` caches each entry's text between calls (an indented
    dump is encoded in pure Python, slowly: each entry is encoded once however often the file is rewritten)."""
    head = json.dumps({"task": task, "level": level, "dump_data_dir": dump_data_dir}, indent=1)[:-2]
    return head + ',\n "data": ' + _object_text(data, encoded, 1) + "\n}"


def _object_text(items: Dict[str, Any], encoded: Optional[Dict[str, str]], depth: int) -> str:
    """``json.dumps(items, indent=1)`` nested at ``depth``, reusing ``encoded[name]`` for the values."""
    if not items:
        return "{}"
    cache = encoded if encoded is not None else {}
    parts = []
    for name, value in items.items():
        text = cache.get(name)
        if text is None:
            text = json.dumps(value, indent=1, allow_nan=True).replace("\n", "\n" + " " * (depth + 1))
            cache[name] = text
        parts.append("{}{}: {}".format(" " * (depth + 1), json.dumps(name), text))
    return "{\n" + ",\n".join(parts) + "\n" + " " * depth + "}"


class MsprobeJsonWriter(object):
    """Writes one ``step{N}/rank{R}`` directory.

    Args:
        directory: the ``step{N}/rank{R}`` directory (created on first write).
        task: the dump.json ``task`` value.
        level: the dump.json ``level`` value.
        saves_tensors: whether ``.pt`` files are written (``dump_data_dir`` is null otherwise).
        background: the thread that writes ``.pt`` files; None writes them at once.
        flush_every: rewrite dump.json after this many new entries. Default 1000 (msprobe's value).
    """

    def __init__(self, directory: str, task: str, level: str, saves_tensors: bool,
                 background: Optional[BackgroundWriter] = None, flush_every: int = 1000) -> None:
        self.directory = directory
        self.task = task
        self.level = level
        self.saves_tensors = saves_tensors
        self.tensor_dir = os.path.join(directory, TENSOR_DIR)
        self._background = background
        self._flush_every = flush_every
        self._data = {}  # type: Dict[str, Any]
        self._stack = {}  # type: Dict[str, List[str]]
        self._construct = {}  # type: Dict[str, Optional[str]]
        self._encoded = {}  # type: Dict[str, str]  # dump.json entry texts, encoded once
        self._stack_encoded = {}  # type: Dict[str, str]
        self._unflushed = 0
        self._made_dirs = False
        self._dump_lock = None  # type: Optional[DumpLock]
        self._lock = threading.Lock()  # backward hooks may run on autograd's threads

    # -- adding ----------------------------------------------------------------------------------
    def add_entry(self, name: str, entry: Dict[str, Any]) -> None:
        """Add (or extend: an in-place collective's output arrives after its input) the entry ``name``."""
        with self._lock:
            if name in self._data:
                self._data[name].update(entry)
                self._encoded.pop(name, None)
            else:
                self._data[name] = entry
            self._unflushed += 1
            due = self._unflushed >= self._flush_every
        if due:
            self.flush(json_only=True)

    def add_stack(self, name: str, lines: List[str]) -> None:
        """stack.json entry ``name`` -> its formatted frames."""
        with self._lock:
            self._stack[name] = lines

    def add_construct(self, name: str, parent: Optional[str]) -> None:
        """construct.json entry ``name`` -> its parent module's name (None at top level)."""
        with self._lock:
            self._construct[name] = parent

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

        def job() -> None:
            _save_pt(path, copy)

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
        self._make_dirs()
        with self._lock:
            dump_dir = self.tensor_dir if self.saves_tensors else None
            text = dump_json_text(self.task, self.level, dump_dir, self._data, self._encoded)
            if not json_only:  # the periodic flush rewrites dump.json alone: do not encode the others
                stack_text = _object_text(self._stack, self._stack_encoded, 0)
                construct_text = json.dumps(self._construct, indent=1)
            self._unflushed = 0
        _write_atomic(os.path.join(self.directory, DUMP_FILE), text)
        if not json_only:
            _write_atomic(os.path.join(self.directory, STACK_FILE), stack_text)
            _write_atomic(os.path.join(self.directory, CONSTRUCT_FILE), construct_text)

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
        self._make_dirs()
        if self._dump_lock is None:
            self._dump_lock = DumpLock(self.directory)
        self._dump_lock.acquire()

    def release(self) -> None:
        """Give the lock back (stop(), exit). Idempotent."""
        if self._dump_lock is not None:
            self._dump_lock.release()


def _save_pt(path: str, tensor: Any) -> None:
    import torch

    def write(descriptor: int) -> None:
        with os.fdopen(os.dup(descriptor), "wb") as handle:
            torch.save(tensor, handle)

    replace_file(path, write, "the tensor file")


def _write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`~ptdbg_ascend.writers.safe_fs.replace_file`)."""
    replace_file(path, lambda descriptor: write_all(descriptor, text.encode("utf-8")))
