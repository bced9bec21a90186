"""Copies of accelerator tensors for tensor files, taken without stopping the training thread.

A tensor file must hold the value a tensor had at its call, whatever the script does to it next; the file
is written later, on the dump's writer thread (``sinks/background.py``). On the CPU the copy is taken at the
call and is already in host memory. On an accelerator (CUDA, NPU) reading a tensor back at the call would
stop the host until the device has caught up: once per saved tensor, hundreds of times a step. Instead:

* at the call (training thread), :func:`take_device_copy` launches a copy on the device, on the stream the
  script runs on, so it is ordered after the work that made the value and before any later in-place change;
  an event recorded after it marks when the copy is complete. Nothing waits.
* on the writer thread, :meth:`DeviceCopy.host` moves it to host memory on a copy stream of its own, made to
  wait for that event on the device: a stream the script never waits for, whichever stream it runs on (the
  default one, a side stream, autograd's). Tensors up to ``PINNED_MAX_BYTES`` go through pinned memory
  (the fast, asynchronous transfer; torch's pinned-memory cache stays small), larger ones straight into
  pageable memory. Only the writer thread waits for the transfer.

The device memory these copies take is bounded by the writer's backlog (256 MiB by default; ``submit``
blocks beyond it); a copy the device has no memory for is read back at the call instead (logged once).
Where a device type has no streams or events in torch (``torch.<type>.Event``...), the copy is read back at
the call, as before.

``DEVICE_COPIES.on_cpu`` (default False) takes this path for CPU tensors too, through torch's CPU stand-ins
for streams and events: how tests and ``bench/device_stream_check.py --emulate`` run it on a machine
without an accelerator. torch is imported on first use (``ptdbg convert`` runs without it).
"""

from __future__ import annotations

from typing import Any, Optional

from ptdbg_ascend.tensor_kinds import warn_once
from ptdbg_ascend.streams import current_stream, stream_module, tool_stream

# Tensors up to this size are moved through pinned host memory. torch caches pinned blocks for reuse and
# never returns them to the system: the bound keeps that cache to a few times this size.
PINNED_MAX_BYTES = 64 * 1024 * 1024


class DeviceCopies:
    """Which tensors take the device path (see the module docstring).

    Attributes:
        on_cpu: CPU tensors too. Default False.
    """

    __slots__ = ("on_cpu",)

    def __init__(self) -> None:
        self.on_cpu = False


DEVICE_COPIES = DeviceCopies()

# Device types whose pinned allocation failed once (no accelerator allocator): pageable copies from then on.
_NO_PINNED = set()


def takes_device_copy(tensor: Any) -> bool:
    """Whether ``tensor``'s copy takes the device path: off the CPU (or any, with ``DEVICE_COPIES.on_cpu``),
    on a device type with streams and events."""
    if tensor.is_cpu and not DEVICE_COPIES.on_cpu:
        return False
    return stream_module(tensor.device.type) is not None


class DeviceCopy:
    """A tensor's copy on its device, taken at a call, not yet in host memory.

    Attributes:
        nbytes: the bytes of the copy (what the writer's backlog counts).
    """

    __slots__ = ("nbytes", "_on_device", "_ready", "_host")

    def __init__(self, on_device: Any, ready: Any) -> None:
        self._on_device = on_device
        self._ready = ready
        self._host: Any = None
        self.nbytes = on_device.numel() * on_device.element_size()

    @classmethod
    def of_host(cls, host: Any) -> DeviceCopy:
        """A copy already in host memory (``host``: a contiguous CPU tensor)."""
        copy = cls.__new__(cls)
        copy._on_device = copy._ready = None
        copy._host = host
        copy.nbytes = host.numel() * host.element_size()
        return copy

    def host(self) -> Any:
        """The copy as a CPU tensor (contiguous); moved on the first call, from the writer thread, and kept.
        Raises what torch raises (an error of the device)."""
        if self._host is None:
            self._host = _to_host(self._on_device, self._ready)
            self._on_device = self._ready = None  # the device memory goes back to torch's cache
        return self._host

    def release(self) -> None:
        """Drop the copy (device and host memory) once it is written: pinned host memory goes back to
        torch's cache for the next copy."""
        self._on_device = self._ready = self._host = None

    def numpy(self) -> Any:
        """:meth:`host` as a numpy array (the copy's dtype is one numpy has: the caller widened it)."""
        return self.host().resolve_conj().resolve_neg().numpy()  # a lazily conjugated view's clone is one too


def take_device_copy(tensor: Any, dtype: Any = None) -> DeviceCopy:
    """Launch a copy of ``tensor`` on its device (converted to ``dtype`` when given; default None: its own
    dtype), contiguous, detached, on the current stream; record when it completes. For tensors
    :func:`takes_device_copy` accepts. Nothing waits for the device."""
    import torch

    module = stream_module(tensor.device.type)
    data = tensor.detach()
    try:
        copy = _copy_on_device(data, dtype)
    except RuntimeError as error:  # torch.OutOfMemoryError is one
        if "out of memory" not in str(error).lower():
            raise
        # The script has the device's memory: a week-long run must not stop for a dump's copy. This one is
        # read back now (the training thread waits), as copies were before.
        warn_once("device copies", "{} memory is full: tensor files of its tensors are read back at the call "
                  "while it is (slower; the files are the same).".format(tensor.device))
        with torch.no_grad():
            return DeviceCopy.of_host(data.to("cpu", dtype=dtype or data.dtype, copy=True).contiguous())
    ready = module.Event()
    ready.record(current_stream(module, copy.device))
    return DeviceCopy(copy, ready)


def _copy_on_device(data: Any, dtype: Any) -> Any:
    """A contiguous copy of ``data`` on its device, in ``dtype`` when given, launched on the current stream."""
    import torch

    with torch.no_grad():
        if dtype is not None and dtype != data.dtype:
            return data.to(dtype=dtype, memory_format=torch.contiguous_format)
        return data.clone(memory_format=torch.contiguous_format)


def on_host(value: Any) -> Any:
    """``value`` with a :class:`DeviceCopy` replaced by its numpy array (anything else as it is)."""
    return value.numpy() if type(value) is DeviceCopy else value


def host_tensor(value: Any) -> Any:
    """``value`` with a :class:`DeviceCopy` replaced by its CPU tensor (anything else as it is)."""
    return value.host() if type(value) is DeviceCopy else value


def release_copy(value: Any) -> None:
    """Drop a written :class:`DeviceCopy`'s memory now (its pinned host buffer goes back to torch's cache for
    the next copy); anything else is left to the garbage collector."""
    if type(value) is DeviceCopy:
        value.release()


def _to_host(on_device: Any, ready: Any) -> Any:
    module = stream_module(on_device.device.type)
    stream = tool_stream(module, on_device.device, "copy")
    with module.stream(stream):  # the writer thread's current stream (and device) for what follows
        stream.wait_event(ready)  # on the device: the copy stream starts once the call's copy is complete
        host = _pinned_buffer(on_device)
        if host is None:
            # Pageable memory: the transfer ends before to() returns (it waits for the copy stream only).
            # On the CPU stand-in the copy is host memory already, and to() returns it.
            return on_device.to("cpu")
        host.copy_(on_device, non_blocking=True)
        done = module.Event()
        done.record(stream)
        done.synchronize()  # this thread only
        return host


def _pinned_buffer(on_device: Any) -> Optional[Any]:
    """An empty pinned CPU tensor shaped like ``on_device``, or None: a CPU tensor, over
    ``PINNED_MAX_BYTES``, or no pinned allocator for its device type (remembered)."""
    device_type = on_device.device.type
    if on_device.is_cpu or device_type in _NO_PINNED or \
            on_device.numel() * on_device.element_size() > PINNED_MAX_BYTES:
        return None
    import torch

    try:
        return torch.empty(on_device.shape, dtype=on_device.dtype, pin_memory=True)
    except RuntimeError:  # no pinned allocator for this accelerator
        _NO_PINNED.add(device_type)
        return None
