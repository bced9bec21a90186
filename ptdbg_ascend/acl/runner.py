"""Re-execute one API call under the NPU's ACL (operator-level) dump.

The call sequence is the original tool's: ``torch_npu.npu.init_dump()``, ``set_dump(config file)``,
``synchronize()``, the re-run, ``synchronize()``, ``finalize_dump()``; ``finalize_dump`` also runs when
the re-run raises, so a failed re-run never leaves the device dumping every later kernel.

The re-run happens inside the tool's "inside a wrapped API" mark (observers always run with it), so
the torch functions the API calls internally (``F.batch_norm`` -> ``torch.batch_norm``) are neither
counted nor dumped again: that is the guard against nested re-entry. It works on copies of the
tensor arguments, so it never changes training state (in-place APIs, batch_norm running statistics,
the model's ``.grad``).
"""

from __future__ import annotations

from typing import Any, Optional

from ptdbg_ascend.dump.observers import ApiCall
from ptdbg_ascend.errors import ParameterError
from ptdbg_ascend.log import logger

# Backward of these APIs: the gradient goes to output 0 of their tuple output (values of sort, the
# attention output of npu_flash_attention), as in the original tool.
_FIRST_OUTPUT_APIS = ("_sort_", "npu_flash_attention")


def _copies(value: Any, keep_grad: bool) -> Any:
    """``value`` with every tensor replaced by a detached copy (that requires grad where the original
    did, when ``keep_grad``). The re-run then cannot change training state: an in-place API, the
    running statistics of batch_norm, or the model's ``.grad`` (the backward re-run builds its own
    graph on the copies)."""
    if hasattr(value, "requires_grad") and hasattr(value, "detach"):
        if keep_grad and value.requires_grad:
            # A non-leaf copy (clone of a fresh leaf), so an in-place API may write into it.
            return value.detach().requires_grad_().clone()
        return value.detach().clone()
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple
        return type(value)(*[_copies(item, keep_grad) for item in value])
    if isinstance(value, (list, tuple)):
        return type(value)(_copies(item, keep_grad) for item in value)
    if isinstance(value, dict):
        return {key: _copies(item, keep_grad) for key, item in value.items()}
    return value


def _synchronized(torch_npu: Any, config_file: str, run: Any) -> Any:
    npu = torch_npu.npu
    npu.init_dump()
    try:
        npu.set_dump(config_file)
        npu.synchronize()
        result = run()
        npu.synchronize()
    finally:
        npu.finalize_dump()
    return result


def rerun_forward(torch_npu: Any, call: ApiCall, args: Any, kwargs: Any, config_file: str) -> None:
    """Re-execute ``call`` (``call.original(*args, **kwargs)``) under ACL dump, on copies of its
    tensor arguments (made before the dump starts, so the copies are not in the dump)."""
    args, kwargs = _copies(args, False), _copies(kwargs, False)  # none requires grad: no graph is built

    def run() -> Any:
        output = call.original(*args, **kwargs)
        if call.prefix == "Tensor" and call.api == "__getitem__" and hasattr(output, "cpu"):
            output = output.cpu()  # a view launches no kernel: the copy makes the operator run
        return output

    _synchronized(torch_npu, config_file, run)
    logger.info(f"Dump {call.forward_name} op file.")


def backward_target(call: ApiCall, output: Any) -> Optional[Any]:
    """The tensor whose backward is dumped: the output itself, or output 0 of sort /
    npu_flash_attention; None (with the guide's warning) when the output is not a tensor."""
    if hasattr(output, "backward"):
        return output
    if isinstance(output, (list, tuple)) and output and any(key in "_" + call.api + "_" for key in _FIRST_OUTPUT_APIS) \
            and hasattr(output[0], "backward"):
        return output[0]
    logger.warning("The output of {} is not of tensor type and cannot be automatically derived. you can manually "
                   "construct a single API backward case for ACL dump.".format(call.backward_name))
    return None


def rerun_backward(torch_npu: Any, call: ApiCall, args: Any, kwargs: Any, gradient: Any, gradient_file: str,
                   config_file: str) -> bool:
    """Rebuild the forward of ``call`` on copies of its inputs and run its backward under ACL dump, with
    ``gradient`` (a CPU tensor loaded from ``gradient_file``) as the incoming gradient.

    Returns False when nothing was dumped (non-tensor output; the guide's warning is logged).

    Raises:
        ParameterError: the gradient's shape is not the output's shape.
    """
    import torch

    with torch.enable_grad():
        output = call.original(*_copies(args, True), **_copies(kwargs, True))
    target = backward_target(call, output)
    if target is None:
        return False
    if tuple(gradient.shape) != tuple(target.shape):
        raise ParameterError("backward_input", gradient_file,
                             "its shape {} is not the shape {} of the output of {}".format(
                                 list(gradient.shape), list(target.shape), call.forward_name),
                             f"Use the {call.backward_name}_input.0.npy file of the same run.")
    if not target.requires_grad:
        raise ParameterError("scope", [call.backward_name],
                             f"the output of {call.forward_name} does not require grad, so it has no backward to dump")
    # bf16 tensors are dumped as float32 npy: cast back to the output's own dtype and device.
    grad = gradient.to(device=target.device, dtype=target.dtype)
    _synchronized(torch_npu, config_file, lambda: target.backward(grad))
    logger.info(f"Dump {call.backward_name} op file.")
    return True
