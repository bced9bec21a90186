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
from typing import Any, Dict, Iterator, List, Optional, Set, Tuple

# Per device type: torch's stream module, or None when it has no streams.
_STREAM_MODULES: Dict[str, Any] = {}
_TOOL_STREAMS: Dict[Tuple[str, Optional[int], str], Any] = {}
_TOOL_STREAMS_LOCK = threading.Lock()
_CUDA_RAW: List[Any] = []  # [torch._C._cuda_getCurrentStream or None], filled on first use


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


def _stream_key(module: Any, device: Any) -> Any:
    """A hashable key of the calling thread's current stream of ``device``. On CUDA the raw
    ``(id, device index, device type)`` torch keeps, without a Stream object (called for every tensor
    whose statistics wait on the device: a few microseconds less each)."""
    if device.type == "cuda":
        raw = _cuda_current()
        if raw is not None:
            return raw(device.index)
    return current_stream(module, device)


def _cuda_current() -> Optional[Any]:
    """torch's ``_cuda_getCurrentStream(device index)`` (None in a build without CUDA)."""
    if not _CUDA_RAW:
        import torch

        _CUDA_RAW.append(getattr(torch._C, "_cuda_getCurrentStream", None))
    return _CUDA_RAW[0]


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


class LaunchStreams(object):
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

    def note(self, device: Any) -> None:
        """Remember the calling thread's current stream of ``device`` (an accelerator's, or any device type
        with streams): call it when launching work there that is read later."""
        module = stream_module(device.type)
        if module is None:
            return
        seen = (device, _stream_key(module, device))
        if seen in self._seen:
            return
        stream = current_stream(module, device)
        with self._lock:
            if seen in self._seen:
                return
            streams = self._streams.setdefault(device, [])
            if len(streams) >= self.MAX_STREAMS:
                self._overflowed.add(device)
                return
            streams.append(stream)
            self._seen.add(seen)

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
