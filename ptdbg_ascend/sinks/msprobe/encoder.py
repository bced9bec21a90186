"""The msprobe sink's one dump.json encoder: a call's values straight to their entry's text, as
``json.dumps(entry, indent=1)`` of msprobe 1.0.4's leaves would write it (``reference/msprobe_1_0_4.md``
§6.2-6.3): a tensor is a typed leaf (``leaves.py``), any other value its ``{"type", "value"}`` form, containers
are recursed, and what cannot be represented is ``null`` (with a warning once per type).

A tensor whose numbers come later (read back from a device in batches, or from the copy the writer thread saves:
the writer's ``statistics/planner.StatisticsPlanner`` decides) is written as :data:`PLACEHOLDER` and collected
as a :class:`~ptdbg_ascend.sinks.msprobe.leaves.TensorLeaf`; the entry is then an :class:`EntryTemplate`, its
text with a placeholder per such leaf, finished once their numbers are in (``entries.py``). Entries are kept as
text, never as dicts: on an accelerator thousands of entries wait for their batch, and dicts would be walked
again and again by Python's garbage collector, then encoded.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy
import torch

from ptdbg_ascend import tensor_kinds
from ptdbg_ascend.formats.dump_json import NOT_SAVED
from ptdbg_ascend.log import logger
from ptdbg_ascend.sinks.msprobe.json_text import (list_of_texts, member_of_text, object_of_texts, string_text,
                                                  tensor_leaf_text, value_text)
from ptdbg_ascend.sinks.msprobe.leaves import TensorLeaf, Tail, crc32_hex, dtype_text, leaf_text
from ptdbg_ascend.sinks.msprobe.pt_files import data_names
from ptdbg_ascend.statistics.msprobe_rules import eager_statistics, tensor_statistics_msprobe, with_extremes
from ptdbg_ascend.statistics.pending import PendingStatistics

# Nesting levels of an entry's text (json.dumps(indent=1) of dump.json): the entry's member is at depth 1,
# its object at level 2, its blocks' values at 3, and the blocks' items (the leaves) at 4.
ENTRY_DEPTH, BLOCK_LEVEL, LEAF_LEVEL = 1, 3, 4

# Stands for a late leaf's text in an entry's text: a NUL never occurs in JSON text (json escapes it in strings).
PLACEHOLDER = "\x00"

# ``save(stem, tensor)`` -> (the data_name written in the leaf, the statistics the writer thread reads from its
# copy or None); raises :class:`TensorNotSaved`.
SaveTensor = Callable[[str, Any], Tuple[str, Any]]
Statistics = List[Optional[float]]

_TENSOR, _PARAMETER, _STRIDED = torch.Tensor, torch.nn.Parameter, torch.strided
_SCALAR_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}  # {"type": ..., "value": ...}
_KEYED = ("device", "dtype")  # a str under these keys is a torch.device / torch.dtype
_WARNED_TYPES: Set[str] = set()  # "not supported" is logged once per type, not once per call
_MEMORY_FORMAT = "<class 'torch.memory_format'>"  # recorded as null on purpose: said once, at INFO


class TensorNotSaved(Exception):
    """Raised by a ``save`` callback that could not save the tensor (no memory for its copy): the leaf is
    written without a ``data_name``, with ``reason`` under ``NOT_SAVED``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EntryTemplate:
    """An entry's member text with a :data:`PLACEHOLDER` for each of its ``late`` leaves, in order."""

    __slots__ = ("text", "late")

    def __init__(self, text: str, late: List[TensorLeaf]) -> None:
        self.text, self.late = text, late

    def read(self) -> bool:
        """Whether every late leaf's numbers are in."""
        return all(leaf.read() for leaf in self.late)

    def render(self) -> str:
        """The finished member text (once :meth:`read`)."""
        parts = self.text.split(PLACEHOLDER)
        pieces = [parts[0]]
        for leaf, part in zip(self.late, parts[1:]):
            pieces.append(leaf.text())
            pieces.append(part)
        return "".join(pieces)

    def longest(self) -> int:
        """An upper bound of :meth:`render`'s length."""
        return len(self.text) - len(self.late) + sum(leaf.longest() for leaf in self.late)


Entry = Union[str, EntryTemplate]  # a finished member text, or one still waiting for numbers


def entry_data_names(entry: Entry) -> List[str]:
    """Every ``data_name`` an entry names (its text's and its late leaves')."""
    if type(entry) is str:
        return data_names(json.loads("{" + entry + "}"))
    names = data_names(json.loads("{" + entry.text.replace(PLACEHOLDER, "null") + "}"))
    return names + [name for name in (leaf.data_name() for leaf in entry.late) if name is not None]


def entry_length(entry: Entry) -> int:
    """An upper bound of the length of an entry's member text once finished."""
    return len(entry) if type(entry) is str else entry.longest()


# A block of an entry's object: a line at the blocks' indent (3 spaces) that starts a key. Deeper lines have more
# indent, and a string never holds a raw newline.
_BLOCK_START = re.compile(r',\n(?=   ")')


def extended(name: str, entry: Entry, addition: Entry) -> Entry:
    """Entry ``name`` with the blocks of ``addition`` added (a key both have takes the new block, in its old
    place): an in-place collective's output arrives after its input. Rare, so the texts are split again."""
    blocks = dict(_blocks(entry))
    blocks.update(_blocks(addition))
    late = [leaf for _, leaves in blocks.values() for leaf in leaves]
    return _entry(name, [(key, text) for key, (text, _) in blocks.items()], late)


def _entry(name: str, blocks: Sequence[Tuple[str, str]], late: List[TensorLeaf]) -> Entry:
    """Entry ``name`` of ``(key, text)`` blocks: its member text, or a template while ``late`` leaves wait."""
    text = member_of_text(name, object_of_texts(blocks, BLOCK_LEVEL - 1), ENTRY_DEPTH)
    return EntryTemplate(text, late) if late else text


def _blocks(entry: Entry) -> List[Tuple[str, Tuple[str, List[TensorLeaf]]]]:
    """``(key, (text, late leaves))`` of an entry's blocks."""
    text, late = (entry, []) if type(entry) is str else (entry.text, list(entry.late))
    decoder = json.JSONDecoder()
    body = text[decoder.raw_decode(text, ENTRY_DEPTH + 1)[1] + 2:]
    if body == "{}":
        return []
    blocks = []
    for member in _BLOCK_START.split(body[2:-(ENTRY_DEPTH + 3)]):
        key, end = decoder.raw_decode(member, 3)
        block = member[end + 2:]
        count = block.count(PLACEHOLDER)
        blocks.append((key, (block, late[:count])))
        del late[:count]
    return blocks


class EntryEncoder:
    """Writes a sink's entries as text.

    Args:
        statistics_of: a tensor's ``[Max, Min, Mean, Norm]`` read now (the sink's cache). Default
            ``msprobe_rules.tensor_statistics_msprobe``.
        md5: add msprobe's ``md5`` (CRC-32) to every tensor leaf. Default False.

    What a step's writer decides is given by :meth:`bind`: until then every tensor's statistics are read now and
    no tensor is saved.
    """

    def __init__(self, statistics_of: Optional[Callable[[Any], Statistics]] = None, md5: bool = False) -> None:
        self._statistics_of = statistics_of or tensor_statistics_msprobe
        self._md5 = md5
        self._save: Optional[SaveTensor] = None
        self._takes_device: Callable[[Any], bool] = _never
        self._pending_of: Optional[Callable[[Any], Any]] = None
        self._peek = tensor_kinds.transform_peek()
        self._plain_cpu = not md5  # (bind)

    def bind(self, save: Optional[SaveTensor], takes_device: Optional[Callable[[Any], bool]],
             pending_of: Optional[Callable[[Any], Any]], cpu_now: bool = False) -> None:
        """A step's writer: ``save`` writes a tensor's file (None: statistics only); ``takes_device(tensor)``
        whether its statistics are read back later (None: never), ``pending_of(tensor)`` then gives them (its
        planner's); ``cpu_now`` (default False): ``takes_device`` is False for every CPU tensor."""
        self._save, self._takes_device, self._pending_of = save, takes_device or _never, pending_of
        # The common leaf straight from its numbers (values_block): a CPU tensor's statistics read now, no file.
        self._plain_cpu = save is None and not self._md5 and (cpu_now or takes_device is None)

    def entry(self, name: str, blocks: Sequence[Tuple[str, str]], late: List[TensorLeaf]) -> Entry:
        """Entry ``name`` of ``(key, text)`` blocks from the methods below; ``late``: the leaves they collected."""
        return _entry(name, blocks, late)

    def values_block(self, values: Sequence[Any], base: str, late: List[TensorLeaf]) -> str:
        """A block that is a list of values (``input_args``, ``output``, a backward's ``input``); ``base`` its
        files' stem (``{call}.input``), ``.{i}`` added per item. ``late`` collects the leaves written later."""
        texts = []
        plain_cpu = self._plain_cpu and (self._peek is None or self._peek() is None)
        for index, value in enumerate(values):
            # Most values are plain CPU tensors of a statistics dump: their leaf from the numbers, without
            # value()/_tensor()'s dispatch (what those would write, tested in test_encoder_fast_leaf).
            kind = type(value)
            if plain_cpu and (kind is _TENSOR or kind is _PARAMETER) and value.is_cpu and value.layout is _STRIDED \
                    and not value.is_nested and not value.is_quantized:
                try:
                    numbers = self._statistics_of(value)
                except (RuntimeError, TypeError, ValueError, NotImplementedError):  # value() says what it is
                    numbers = None
                text = None if numbers is None else tensor_leaf_text(
                    LEAF_LEVEL, dtype_text(value.dtype), value.shape, bool(value.requires_grad), numbers)
                if text is not None:
                    texts.append(text)
                    continue
            texts.append(self.value(value, LEAF_LEVEL, f"{base}.{index}", None, late))
        return list_of_texts(texts, BLOCK_LEVEL)

    def keywords_block(self, kwargs: Dict[str, Any], base: str, late: List[TensorLeaf]) -> str:
        """``input_kwargs``. A keyword's file is named like its compare row, ``{base}.{key}.0`` (1.0.4 wrote
        ``....kwargs.{key}.pt``, which its own compare could not find: §12 quirk 1)."""
        return object_of_texts([(key, self.value(value, LEAF_LEVEL, f"{base}.{key}.0" if isinstance(value, _TENSOR)
                                                 else f"{base}.{key}", key, late))
                                for key, value in kwargs.items()], BLOCK_LEVEL)

    def value(self, value: Any, level: int, path: str, key: Optional[str], late: List[TensorLeaf]) -> str:
        """The text of ``value`` nested at ``level``: ``path`` is its file stem, ``key`` the enclosing dict key
        (``device``/``dtype`` values are typed by it); :data:`PLACEHOLDER` for a leaf appended to ``late``."""
        kind = type(value)
        if kind is _TENSOR or kind is _PARAMETER or isinstance(value, _TENSOR):
            return self._tensor(value, level, path, late)
        if value is None:
            return "null"
        type_name = _SCALAR_TYPES.get(kind)
        if type_name is not None and not (kind is str and key in _KEYED):
            text = string_text(value) if kind is str else value_text(value)
            return "{\n" + " " * (level + 1) + '"type": "' + type_name + '",\n' + " " * (level + 1) + \
                '"value": ' + text + "\n" + " " * level + "}"
        if kind is list or kind is tuple or (isinstance(value, (list, tuple)) and not isinstance(value, torch.Size)):
            return list_of_texts([self.value(item, level + 1, f"{path}.{index}", None, late)
                                  for index, item in enumerate(value)], level)
        if kind is dict or isinstance(value, dict):
            members: Dict[str, str] = {}  # (str() of two keys may agree: the later value, the first place)
            for name, item in value.items():
                members[str(name)] = self.value(item, level + 1, f"{path}.{name}", str(name), late)
            return object_of_texts(list(members.items()), level)
        return value_text(_other_value(value, path, key), level)

    def _tensor(self, tensor: Any, level: int, path: str, late: List[TensorLeaf]) -> str:
        peek = self._peek
        if ((type(tensor) is not _TENSOR and type(tensor) is not _PARAMETER) or tensor.layout is not _STRIDED
                or tensor.is_nested or tensor.is_quantized or (peek is not None and peek() is not None)):
            return self._special(tensor, level, path)  # (peek: inside a torch.func transform)
        try:
            data_name, from_copy = self._save(path, tensor) if self._save is not None else (None, None)
            if from_copy is not None:  # read by the writer thread from the copy it saves
                return self._leaf(tensor, level, from_copy, data_name, late)
            if self._takes_device(tensor):  # read back from the device in a batch
                return self._leaf(tensor, level, self._pending_of(tensor), data_name, late)
            numbers = self._statistics_of(tensor)
            if data_name is None and not self._md5:  # the common case: four finite floats, nothing more
                text = tensor_leaf_text(level, dtype_text(tensor.dtype), tensor.shape, bool(tensor.requires_grad),
                                        numbers)
                if text is not None:
                    return text
            return self._leaf(tensor, level, with_extremes(tensor, numbers), data_name, late)
        except TensorNotSaved as error:
            return self._not_saved(tensor, level, error.reason)
        except (RuntimeError, TypeError, ValueError, NotImplementedError):  # a dtype without arithmetic...
            return self._special(tensor, level, path)

    def _leaf(self, tensor: Any, level: int, numbers: Any, data_name: Optional[str], late: List[TensorLeaf]) -> str:
        """The leaf of a dense tensor of its own class with ``numbers``: its text, or :data:`PLACEHOLDER` for a
        leaf appended to ``late`` while they are pending."""
        tail = self._tail(tensor, data_name) if data_name is not None or self._md5 else ()
        dtype, shape, requires_grad = dtype_text(tensor.dtype), tuple(tensor.shape), bool(tensor.requires_grad)
        if type(numbers) is PendingStatistics and not numbers.done():
            late.append(TensorLeaf(level, dtype, shape, requires_grad, numbers, tail))
            return PLACEHOLDER
        return leaf_text(level, dtype, shape, requires_grad, numbers, tail)

    def _tail(self, tensor: Any, data_name: Optional[str]) -> Tail:
        tail = (("md5", crc32_hex(tensor)),) if self._md5 and tensor.device.type != "meta" else ()
        return tail + (("data_name", data_name),) if data_name is not None else tail

    def _not_saved(self, tensor: Any, level: int, reason: str) -> str:
        """The leaf of a tensor whose file was not saved: its statistics read now (null when they cannot be: out of
        memory again) and why."""
        try:
            numbers, tail = eager_statistics(tensor, self._statistics_of), self._tail(tensor, None)
        except Exception:  # noqa: BLE001 - the leaf keeps what is known without values
            numbers, tail = [None, None, None, None], ()
        return leaf_text(level, dtype_text(tensor.dtype), tuple(tensor.shape), bool(tensor.requires_grad), numbers,
                         tail + ((NOT_SAVED, reason),))

    def _special(self, tensor: Any, level: int, path: str) -> str:
        """The leaf of a tensor of a special kind (``tensor_kinds.py``): ``dtype`` and ``requires_grad`` are the
        tensor's own; shape, statistics and the ``.pt`` file those of the values its record holds (a vmap batch
        with its batch dims first, the dense values of a sparse tensor...), and ``tensor_kind`` names the kind.
        Without values (meta, fake...): null statistics and no file. Never raises."""
        kind = "plain"
        shape: Sequence[int] = tensor_kinds.shape_of(tensor)
        numbers: Sequence[Any] = [None, None, None, None]
        tail: Tail = ()
        try:
            with tensor_kinds.reading_values():
                plain, kind = tensor_kinds.plain_values(tensor)
                if plain is not None:
                    data_name = self._save(path, plain)[0] if self._save is not None else None
                    numbers, shape, tail = eager_statistics(plain), list(plain.shape), self._tail(plain, data_name)
        except Exception as error:  # noqa: BLE001 - a dump must never stop training
            tensor_kinds.warn_once("leaf:" + kind, f"A {kind} tensor ({tensor.dtype}) cannot be read "
                                   f"({type(error).__name__}: {error}); its leaves hold null statistics and no file.")
            shape, numbers, tail = tensor_kinds.shape_of(tensor), [None, None, None, None], ()
        try:
            requires_grad = bool(tensor.requires_grad)
        except Exception:  # noqa: BLE001
            requires_grad = False
        if kind != "plain":
            tail += (("tensor_kind", kind),)
        return leaf_text(level, str(tensor.dtype), shape, requires_grad, numbers, tail)


def _never(_tensor: Any) -> bool:
    return False


def _other_value(value: Any, path: str, key: Optional[str]) -> Any:
    """The dump.json form of a value that is not a tensor, None, a container or an exact bool/int/float/str."""
    if key == "device" and isinstance(value, (torch.device, str)):
        return {"type": "torch.device", "value": str(value)}
    if key == "dtype" and isinstance(value, torch.dtype):
        return {"type": "torch.dtype", "value": str(value)}
    if isinstance(value, (torch.dtype, torch.device)):
        return {}
    if isinstance(value, torch.memory_format):
        # null, as msprobe 1.0.4 writes it: its run_ut passes a recorded kwarg's "value" to the API as is (a
        # string there is a TypeError) and None is torch's default. Autograd's ones_like passes one on every
        # backward, so this is said once, at INFO, naming where.
        if _MEMORY_FORMAT not in _WARNED_TYPES:
            _WARNED_TYPES.add(_MEMORY_FORMAT)
            logger.info(f"memory_format arguments are recorded as null, as msprobe 1.0.4 does (first at {path}).")
        return None
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if isinstance(value, kind):
            return {"type": name, "value": value}
    if isinstance(value, slice):
        return {"type": "slice", "value": [value.start, value.stop, value.step]}
    if value is Ellipsis:
        return {"type": "ellipsis", "value": "..."}
    if isinstance(value, torch.Size):
        return {"type": "torch.Size", "value": list(value)}
    if isinstance(value, numpy.generic):
        return {"type": type(value).__name__, "value": value.item()}
    type_name = str(type(value))
    if type_name not in _WARNED_TYPES:
        _WARNED_TYPES.add(type_name)
        logger.warning(f"Data type {type_name} is not supported (first seen at {path}); such values are recorded "
                       "as null.")
    return None
