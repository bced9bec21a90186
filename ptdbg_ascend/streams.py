"""Accelerator streams: which stream a call's work was launched on, and reading it back safely.

The tool launches work on a device at a call (statistics reductions, overflow flags, tensor copies) and reads
it back later, in a batch, maybe on another thread. A read is ordered after the work only when both run on
one stream; a script may run on a side stream (FSDP's all-gather stream, a prefetch stream, its own
``torch.cuda.stream(s)`` block), and torch's streams do not wait for each other. So every launch notes the
stream it went to (:meth:`LaunchStreams.note`), and a read first makes its own stream wait for each noted
one on the device (:meth:`LaunchStreams.wait`): no host sync, and the read's own sync then covers the work.

Works with any ``torch.<device type>`` module that has ``current_stream``, ``Stream``, ``Event`` and
``stream`` (CUDA, NPU with torch_npu, XPU; torch's CPU stand-ins for tests). torch is imported on first use.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional

# Per device type: torch's stream module, or None when it has no streams.
_STREAM_MODULES: Dict[str, Any] = {}


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


class LaunchStreams(object):
    """The streams the tool's device work was launched on, per device, for reads to wait for.

    At most ``MAX_STREAMS`` distinct streams are kept per device; a script that makes more (a new stream
    every step) turns the wait into a synchronisation of the whole device, which is slower and as safe.
    """

    MAX_STREAMS = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: Dict[Any, List[Any]] = {}
        self._overflowed = set()

    def note(self, device: Any) -> None:
        """Remember the calling thread's current stream of ``device`` (an accelerator's, or any device type
        with streams): call it when launching work there that is read later."""
        module = stream_module(device.type)
        if module is None:
            return
        stream = current_stream(module, device)
        seen = self._streams.get(device)
        if seen is not None and stream in seen:
            return
        with self._lock:
            seen = self._streams.setdefault(device, [])
            if stream in seen:
                return
            if len(seen) >= self.MAX_STREAMS:
                self._overflowed.add(device)
                return
            seen.append(stream)

    def wait(self, device: Any) -> None:
        """Make the calling thread's current stream of ``device`` wait, on the device, for the work launched
        so far on every noted stream (a whole-device synchronisation past ``MAX_STREAMS``)."""
        module = stream_module(device.type)
        if module is None:
            return
        if device in self._overflowed and hasattr(module, "synchronize"):
            module.synchronize(device if device.type != "cpu" else None)
            return
        reader = current_stream(module, device)
        for stream in list(self._streams.get(device, ())):
            if stream != reader:
                reader.wait_stream(stream)


LAUNCH_STREAMS = LaunchStreams()
