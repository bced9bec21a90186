"""Accelerator streams: which stream a call's work was launched on, and reading it back safely.

The tool launches work on a device at a call (statistics reductions, overflow flags, tensor copies) and reads
it back later, in a batch, maybe on another thread. A read is ordered after the work only when both run on
one stream; a script may run on a side stream (FSDP's all-gather stream, a prefetch stream, its own
``torch.cuda.stream(s)`` block), and torch's streams do not wait for each other. So every launch notes the
stream it went to (:meth:`LaunchStreams.note`), and a read runs on a stream of the tool's own that first
waits for each noted one on the device (:meth:`LaunchStreams.reading`): no host sync, no wait put on the
script's streams, and the read's own sync then covers the work.

Works with any ``torch.<device type>`` module that has ``current_stream``, ``Stream``, ``Event`` and
``stream`` (CUDA, NPU with torch_npu, XPU; torch's CPU stand-ins for tests). torch is imported on first use.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

# Per device type: torch's stream module, or None when it has no streams.
_STREAM_MODULES: Dict[str, Any] = {}
_TOOL_STREAMS: Dict[Tuple[str, Optional[int], str], Any] = {}
_TOOL_STREAMS_LOCK = threading.Lock()


def stream_module(device_type: str) -> Optional[Any]:
    """``torch.<device_type>`` when it has the stream and event API (current_stream, Stream, Event, stream),
    else None."""
    if device_type not in _STREAM_MODULES:
        import torch

        module = getattr(torch, device_type, None)
        wanted = ("current_stream", "Stream", "Event", "stream")
        _STREAM_MODULES[device_type] = (module if module is not None and all(hasattr(module, name) for name in wanted)
                                        else None)
    return _STREAM_MODULES[device_type]


def current_stream(module: Any, device: Any) -> Any:
    """The calling thread's current stream of ``device`` (``module``: from :func:`stream_module`)."""
    if device.type == "cpu":
        return module.current_stream()  # torch.cpu's takes no device
    return module.current_stream(device)


def _stream_key_function(device_type: str) -> Optional[Callable[[Any], Any]]:
    """``key(device)``: a hashable key of the calling thread's current stream of a ``device_type`` device, or
    None when the type has no streams. Called for every tensor whose statistics wait on its device, so it is
    chosen once per type: on CUDA torch's raw ``(id, device index, device type)``, without a Stream object."""
    module = stream_module(device_type)
    if module is None:
        return None
    if device_type == "cuda":
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentStream", None)
        if raw is not None:
            return lambda device: raw(device.index)
    if device_type == "cpu":
        return lambda device: module.current_stream()  # torch.cpu's takes no device
    return module.current_stream


def tool_stream(module: Any, device: Any, purpose: str) -> Any:
    """The tool's own stream of ``device`` for ``purpose`` ("read": read-backs; "copy": the writer's
    transfers of tensor copies), made on first use and kept. Separate purposes keep a short read from
    queuing behind a large transfer."""
    key = (device.type, device.index, purpose)
    with _TOOL_STREAMS_LOCK:
        stream = _TOOL_STREAMS.get(key)
        if stream is None:
            stream = _TOOL_STREAMS[key] = module.Stream() if device.type == "cpu" else module.Stream(device=device)
    return stream


class LaunchStreams:
    """The streams the tool's device work was launched on, per device, for reads to wait for.

    At most ``MAX_STREAMS`` distinct streams are kept per device; a script that makes more (a new stream
    every step) turns the wait into a synchronisation of the whole device, which is slower and as safe.
    """

    MAX_STREAMS = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: Dict[Any, List[Any]] = {}
        self._seen: Set[Tuple[Any, Any]] = set()  # (device, stream key): the check of every note()
        self._overflowed: Set[Any] = set()
        self._keys: Dict[str, Optional[Callable[[Any], Any]]] = {}  # per device type: _stream_key_function's

    def note(self, device: Any) -> Any:
        """Remember the calling thread's current stream of ``device`` (an accelerator's, or any device type
        with streams): call it when launching work there that is read later. Returns a hashable key of that
        stream on that device (``(device, None)`` for a device type without streams): work launched under
        equal keys runs in launch order."""
        kind = device.type
        key = self._keys[kind] if kind in self._keys else self._keys.setdefault(kind, _stream_key_function(kind))
        if key is None:
            return device, None
        seen = (device, key(device))
        if seen in self._seen:
            return seen
        stream = current_stream(stream_module(kind), device)
        with self._lock:
            if seen in self._seen:
                return seen
            streams = self._streams.setdefault(device, [])
            if len(streams) >= self.MAX_STREAMS:
                self._overflowed.add(device)
                return seen
            streams.append(stream)
            self._seen.add(seen)
        return seen

    @contextlib.contextmanager
    def reading(self, device: Any) -> Iterator[None]:
        """Run the block (the read-back of work launched on ``device``) on a stream of the tool's own, made to
        wait, on the device, for the work launched so far on every noted stream: the read sees that work,
        and no stream of the script is made to wait for anything (a wait put on the script's stream would
        hold its later kernels behind, say, a prefetch on another stream). Past ``MAX_STREAMS``: a
        synchronisation of the whole device first. On a device type without streams: the block as it is."""
        module = stream_module(device.type)
        if module is None:
            yield
            return
        if device in self._overflowed and hasattr(module, "synchronize"):
            module.synchronize(device if device.type != "cpu" else None)
        reader = tool_stream(module, device, "read")
        for stream in list(self._streams.get(device, ())):
            reader.wait_stream(stream)
        with module.stream(reader):
            yield


LAUNCH_STREAMS = LaunchStreams()
