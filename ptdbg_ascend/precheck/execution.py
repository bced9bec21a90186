"""Running one dumped API call twice: the benchmark (CPU, every floating tensor, float dtype argument and
gradient promoted to float64) and the device run (the dumped dtypes, on ``device``; default the CPU,
the only device this tool re-runs on today), forward and, with the dumped output gradients, backward.

- :func:`static_skip_reason` (in ``api_lookup``): the calls that are SKIPped without running, with the reason: APIs the
  pre-check never runs (``admission``: only the wrap list, none with effects beyond its return value),
  random APIs (dropout, rand*, normal, bernoulli, multinomial...), outputs of uninitialised memory
  (empty*), in-place ops that change a tensor's view/metadata (resize_, transpose_...).
- :func:`resolve` (in ``api_lookup``): ``Functional.linear`` -> ``torch.nn.functional.linear``, ``Tensor.__add__`` ->
  ``torch.Tensor.__add__``, ``Torch.matmul`` -> ``torch.matmul``, ``VF.x`` -> ``torch._VF.x``,
  ``NPU.x`` -> ``torch_npu.x`` (when installed). A dump wrapper of this tool is looked through (its
  ``__ptdbg_original__``), and the runs happen inside the "inside a wrapped API" state, so a debugger
  still installed in the process neither counts nor dumps.
- :func:`execute`: the memory budget (``call_budget``: from the recorded shapes before anything is
  loaded, then from a dry run on the meta device before the real runs), then both runs, the run
  device's generators seeded with ``seed`` before each inside ``torch.random.fork_rng``, so the caller's
  random state is left as it was. A run that raises (an op missing on the CPU, a dtype it refuses) is a
  SKIP reason.

Autocast: a call dumped inside ``torch.autocast`` (its entry's ``autocast`` value, or inferred for an older
dump: ``DumpedCall.autocast``) has its device run inside autocast of the same dtype on the run device, as it
ran in training (a bf16 matmul of a bf16 activation and a float32 weight); the float64 benchmark runs
without it (the exact answer the device run is judged against). msprobe 1.0.4 re-runs such calls outside
autocast, where they raise "mat1 and mat2 must have the same dtype" or compute in float32.

Backward: the dump's ``X.n.backward`` entry has ``input`` = the gradients arriving at the outputs (one
per tensor output) and ``output`` = the gradients w.r.t. the inputs (one per tensor input, positional
then keyword, ``null`` for an input without gradient). The re-run computes ``torch.autograd.grad`` of
the tensor outputs with those gradients w.r.t. every input tensor recorded with ``requires_grad``, and
numbers the results by the tensor input's position, as the dump numbers its ``output`` block.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from ptdbg_ascend.precheck import call_budget
from ptdbg_ascend.precheck.api_inputs import DumpedCall
# resolve and static_skip_reason are this module's API too (the pre-check's callers and tests name them here)
from ptdbg_ascend.precheck.api_lookup import Unrunnable, lookup, resolve, static_skip_reason  # noqa: F401
from ptdbg_ascend.precheck.call_values import (DeviceArg, MissingInput, Source, flatten, forward_inputs,
                                               recorded_values, tensor_leaves)

DEFAULT_DEVICE = "cpu"

def _index_as_tuple(api: str, args: List[Any]) -> List[Any]:
    """The dump writes tuples as lists: ``x[:, 1:]`` is recorded as ``[slice, slice]``. An index list of
    slices/None/Ellipsis/tensors is made a tuple again (as a list it would be a different index); a list
    of ints only stays a list (``x[[0, 2]]``, fancy indexing), as the dump cannot tell it from ``x[0, 2]``."""
    if api not in ("__getitem__", "__setitem__") or len(args) < 2 or not isinstance(args[1], list):
        return args
    if all(isinstance(item, int) and not isinstance(item, bool) for item in args[1]):
        return args
    return [args[0], tuple(args[1])] + list(args[2:])


@dataclass
class Runs:
    """What one call produced. Forward lists are the flat leaves of the result (``.forward.output.i``);
    backward dicts map a tensor input's position to its gradient (``.backward.output.i``), only for the
    inputs recorded with ``requires_grad``. ``*_skip``: why that direction was not compared (None: it
    was). ``args``/``kwargs``/``grads``: the rebuilt inputs (for save_error_data)."""

    forward_bench: List[Any] = field(default_factory=list)
    forward_device: List[Any] = field(default_factory=list)
    backward_bench: Dict[int, Any] = field(default_factory=dict)
    backward_device: Dict[int, Any] = field(default_factory=dict)
    forward_skip: Optional[str] = None
    backward_skip: Optional[str] = None
    has_backward: bool = False
    args: List[Any] = field(default_factory=list)
    kwargs: Dict[str, Any] = field(default_factory=dict)
    grads: List[Any] = field(default_factory=list)
    # The dtype autocast computed the call in, when it lowered wider inputs to it (None otherwise): the
    # benchmark starts from the inputs rounded to it, and outputs are judged by its standard.
    computed_in: Any = None


def _bench_dtype(dtype: Any) -> Any:
    import torch

    if dtype.is_complex:
        return torch.complex128
    if dtype.is_floating_point:
        return torch.float64
    return dtype


def _convert(value: Any, tensor: Callable[[Any], Any], dtype: Callable[[Any], Any], device: str) -> Any:
    """A fresh copy of an argument structure: every tensor through ``tensor``, every torch.dtype through
    ``dtype``, a recorded device as ``device``."""
    import torch

    if isinstance(value, torch.Tensor):
        return tensor(value)
    if isinstance(value, torch.dtype):
        return dtype(value)
    if isinstance(value, DeviceArg):
        return torch.device(device)
    if isinstance(value, torch.Size):
        return value
    if isinstance(value, list):
        return [_convert(item, tensor, dtype, device) for item in value]
    if isinstance(value, tuple):
        return tuple(_convert(item, tensor, dtype, device) for item in value)
    if isinstance(value, dict):
        return {key: _convert(item, tensor, dtype, device) for key, item in value.items()}
    return value


class _Side:
    """One run's inputs: leaf copies (where gradients land) and what is passed (a non-leaf clone of a
    leaf that requires grad, so in-place APIs may write to it)."""

    def __init__(self, args: List[Any], kwargs: Dict[str, Any], bench: bool, device: str, need_grad: bool,
                 rounded_to: Any = None) -> None:
        import torch

        self.leaves: List[Any] = []
        self.device = device
        # What autocast hands the call (the gradient flows back through the cast): every float input cast
        # to its dtype, but float64, which autocast never casts.
        kept = (rounded_to, torch.float64)

        def tensor(value: Any) -> Any:
            if rounded_to is not None and value.is_floating_point() and value.dtype not in kept:
                value = value.to(rounded_to)
            target = _bench_dtype(value.dtype) if bench else value.dtype
            leaf = value.detach().to(device=device, dtype=target, copy=True)
            wants_grad = need_grad and value.requires_grad
            if wants_grad:
                leaf.requires_grad_(True)
            self.leaves.append(leaf)
            return leaf.clone() if wants_grad else leaf

        def dtype(value: Any) -> Any:
            return _bench_dtype(value) if bench else value

        self.args = _convert(args, tensor, dtype, device)
        self.kwargs = _convert(kwargs, tensor, dtype, device)


def _lowered_to(autocast: Optional[Tuple[str, str]], inputs: List[Any], outputs: List[Any]) -> Any:
    """The autocast dtype when the call ran lowered to it: it returned a tensor of that dtype from wider
    float inputs (autocast casts every float input of such a call, a matmul, a linear, a conv); None for
    a call outside autocast or one autocast runs in float32 (softmax, a norm) or leaves alone."""
    import torch

    if autocast is None:
        return None
    lowered = getattr(torch, autocast[1].split(".")[-1])
    returned = any(isinstance(out, torch.Tensor) and out.dtype == lowered for out in outputs)
    wider = any(t.is_floating_point() and t.dtype.itemsize > lowered.itemsize for t in inputs)
    return lowered if returned and wider else None


def _autocast(autocast: Optional[Tuple[str, str]], device: str) -> Any:
    """The ``torch.autocast`` context of the device run of a call dumped under autocast (``(device_type,
    dtype)``; None: a null context). Its device type is that of the re-run device (``device``), not the dumped
    one: a call dumped under CUDA autocast runs on the CPU under CPU autocast of the same dtype."""
    import contextlib

    import torch

    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=getattr(torch, autocast[1].split(".")[-1]))


def _call(function: Callable[..., Any], side: _Side, seed: int, need_grad: bool,
          autocast: Optional[Tuple[str, str]] = None) -> Any:
    """One run; ``autocast`` (default None): the dumped call's autocast state, entered around the call only
    (its backward, ``torch.autograd.grad``, runs outside, as torch recommends)."""
    import torch

    from ptdbg_ascend.inside import Inside

    # The seed is for this run only: the generators of the run's device are seeded inside fork_rng, so the
    # caller's (a training script's) random state is kept; torch.manual_seed would also (lazily) seed every
    # CUDA device of the caller.
    device = torch.device(side.device)
    cuda = [device.index or 0] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), Inside(), torch.set_grad_enabled(need_grad), \
            _autocast(autocast, side.device):
        torch.random.default_generator.manual_seed(seed)
        if cuda:
            torch.cuda.default_generators[cuda[0]].manual_seed(seed)
        return function(*side.args, **side.kwargs)


def dry_run_outputs(function: Callable[..., Any], args: List[Any], kwargs: Dict[str, Any]) -> Optional[List[Any]]:
    """The flat outputs of the call run on torch's ``meta`` device (shapes and dtypes, no memory), None
    when the meta device cannot run it (an output size that depends on the data, an op without a meta
    kernel) or this torch has no default-device context (< 2.0)."""
    import torch

    from ptdbg_ascend.inside import Inside

    meta = torch.device("meta")
    if not hasattr(meta, "__enter__"):
        return None
    meta_args = _convert(args, lambda t: t.detach().to(meta), lambda d: d, "meta")
    meta_kwargs = _convert(kwargs, lambda t: t.detach().to(meta), lambda d: d, "meta")
    try:
        with Inside(), torch.no_grad(), meta:
            return flatten(function(*meta_args, **meta_kwargs))
    except Exception:  # noqa: BLE001 -- any refusal of the meta device means "cannot tell", not a failure
        return None


def _error_text(error: BaseException) -> str:
    text = " ".join(str(error).split())
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{type(error).__name__}: {text}"


def _pair_gradients(outputs: List[Any], grads: List[Any], bench: bool, device: str) -> Tuple[List[Any], List[Any]]:
    """The (output, gradient) pairs to differentiate: tensor outputs with a grad_fn and a recorded
    gradient, the gradient as float64 (bench) or its dumped dtype (device) on ``device``."""
    import torch

    tensors = [out for out in outputs if isinstance(out, torch.Tensor)]
    if len(grads) != len(tensors):
        raise Unrunnable("The dump holds {} output gradient(s), the call returned {} tensor(s): they cannot be "
                         "paired.".format(len(grads), len(tensors)))
    chosen_outputs, chosen_grads = [], []
    for out, grad in zip(tensors, grads):
        if grad is None or not isinstance(grad, torch.Tensor) or out.grad_fn is None:
            continue
        if tuple(grad.shape) != tuple(out.shape):
            raise Unrunnable("The dumped output gradient of shape {} does not fit the output of shape {}.".format(
                tuple(grad.shape), tuple(out.shape)))
        target = _bench_dtype(grad.dtype) if bench else grad.dtype
        chosen_outputs.append(out)
        chosen_grads.append(grad.detach().to(device=device, dtype=target, copy=True))
    if not chosen_outputs:
        raise Unrunnable("No output of the re-run has a gradient path to the inputs.")
    return chosen_outputs, chosen_grads


def _backward(side: _Side, outputs: List[Any], grads: List[Any], bench: bool, device: str) -> Dict[int, Any]:
    import torch

    from ptdbg_ascend.inside import Inside

    chosen_outputs, chosen_grads = _pair_gradients(outputs, grads, bench, device)
    wanted = [(index, leaf) for index, leaf in enumerate(side.leaves) if leaf.requires_grad]
    with Inside():
        results = torch.autograd.grad(chosen_outputs, [leaf for _, leaf in wanted], chosen_grads,
                                      allow_unused=True)
    return {index: (None if grad is None else grad.detach()) for (index, _), grad in zip(wanted, results)}


def _detached(values: List[Any]) -> List[Any]:
    import torch

    return [value.detach() if isinstance(value, torch.Tensor) else value for value in values]


def _within_budget(call: DumpedCall, function: Callable[..., Any], args: List[Any], kwargs: Dict[str, Any],
                   inputs: List[Any], before: int, budget: int) -> None:
    """OverBudget when the call's ``before`` bytes (inputs and their copies) and its outputs (from a dry
    run on meta) exceed ``budget``."""
    outputs = dry_run_outputs(function, args, kwargs)
    backward = bool(call.backward) and any(t.requires_grad for t in inputs)
    if outputs is not None:
        after = call_budget.output_bytes(outputs, backward, inputs)
        what = "inputs, their float64 and dumped-dtype copies, both runs' outputs" + (", gradients" if backward else "")
    else:
        after = call_budget.unknown_output_bytes(call, args, kwargs, inputs) * (2 if backward else 1)
        what = "inputs, their copies and outputs estimated from the inputs, as the meta device cannot run it"
    call_budget.check(call, before + after, budget, what)


def _benchmark(function: Callable[..., Any], args: List[Any], kwargs: Dict[str, Any], seed: int, need_grad: bool,
               rounded_to: Any = None) -> Tuple[Optional[_Side], List[Any], Optional[str]]:
    """The float64 run on the CPU: (its side, its flat outputs, None), or (None, [], why it raised)."""
    bench = _Side(args, kwargs, True, "cpu", need_grad, rounded_to=rounded_to)
    try:
        return bench, flatten(_call(function, bench, seed, need_grad)), None
    except Exception as error:  # noqa: BLE001 -- any failure of the user's API is a SKIP reason, not a crash
        return None, [], f"The float64 benchmark run on the CPU raises {_error_text(error)}"


def execute(call: DumpedCall, source: Source, seed: int = 1234, device: str = DEFAULT_DEVICE,
            dumped_outputs: bool = False) -> Runs:
    """Run ``call`` (see the module doc). ``dumped_outputs`` (default False): the device side is the
    dump's own outputs (forward ``output``, backward ``output``) instead of a re-run, for a dump made on
    a device this machine lacks (an NPU dump judged on a machine without an NPU). The memory budget is
    ``source.budget``. Never raises for a call that cannot run: the reasons are in
    ``forward_skip``/``backward_skip``."""
    runs = Runs()
    admitted = _admitted(call, source, runs)
    if admitted is None:
        return runs
    function, args, kwargs, inputs = admitted
    runs.args, runs.kwargs = args, kwargs
    runs.has_backward = bool(call.backward) and any(t.requires_grad for t in inputs)
    runs.grads = _recorded_gradients(call, source, runs) if runs.has_backward else []
    need_grad = runs.has_backward and runs.backward_skip is None

    bench, bench_out, runs.forward_skip = _benchmark(function, args, kwargs, seed, need_grad)
    if runs.forward_skip:
        return runs
    dside, device_out, runs.forward_skip = _device_run(call, source, function, args, kwargs, seed, need_grad,
                                                       device, dumped_outputs)
    if runs.forward_skip:
        return runs
    # Only the device run tells whether autocast lowered the call: the benchmark then starts again from the
    # inputs as autocast handed them to it.
    runs.computed_in = _lowered_to(call.autocast, inputs, device_out)
    if runs.computed_in is not None:
        bench, bench_out, runs.forward_skip = _benchmark(function, args, kwargs, seed, need_grad, runs.computed_in)
        if runs.forward_skip:
            return runs
    runs.forward_bench = _detached(bench_out)
    runs.forward_device = [value.detach().cpu() if hasattr(value, "detach") else value
                           for value in device_out]
    if need_grad:
        _run_backward(runs, call, source, bench, bench_out, dside, device_out, device)
    return runs


def _admitted(call: DumpedCall, source: Source, runs: Runs) -> Optional[Tuple[Callable[..., Any], List[Any],
                                                                          Dict[str, Any], List[Any]]]:
    """``(function, args, kwargs, input tensors)`` of a call that may run within the memory budget; None with
    ``runs.forward_skip`` saying why it may not."""
    reason = call.problem or static_skip_reason(call.prefix, call.api)
    if reason:
        runs.forward_skip = reason
        return None
    try:
        before = call_budget.input_bytes(call)
        call_budget.check(call, before, source.budget, "inputs as loaded, their float64 and dumped-dtype copies")
        function = lookup(call.prefix, call.api)  # admitted: static_skip_reason asked above
        args, kwargs = forward_inputs(call, source)
        args = _index_as_tuple(call.api, args)
        inputs = tensor_leaves(args) + tensor_leaves(kwargs)
        _within_budget(call, function, args, kwargs, inputs, before, source.budget)
    except (Unrunnable, MissingInput) as error:
        runs.forward_skip = str(error)
        return None
    return function, args, kwargs, inputs


def _recorded_gradients(call: DumpedCall, source: Source, runs: Runs) -> List[Any]:
    """The output gradients the dump holds for a call with a backward; ``runs.backward_skip`` says why there are
    none to run it with."""
    grads: List[Any] = []
    try:
        grads = recorded_values(call.backward.get("input"), source, call.full_name + ".backward.input")
    except MissingInput as error:
        runs.backward_skip = str(error)
    if not runs.backward_skip and not any(grad is not None for grad in grads):
        runs.backward_skip = "The dump holds no output gradient of this call."
    return grads


def _device_run(call: DumpedCall, source: Source, function: Callable[..., Any], args: List[Any], kwargs: Dict[str, Any],
                seed: int, need_grad: bool, device: str, dumped_outputs: bool
                ) -> Tuple[Optional[_Side], List[Any], Optional[str]]:
    """The device side: ``(its side, its flat outputs, None)`` from a run in the dumped dtypes, or ``(None, the
    dump's own outputs, None)`` with ``dumped_outputs``; ``(None, [], why)`` when it cannot be had."""
    if dumped_outputs:
        try:
            return None, recorded_values(call.forward.get("output"), source, call.full_name + ".forward.output"), None
        except MissingInput as error:
            return None, [], str(error)
    dside = _Side(args, kwargs, False, device, need_grad)
    try:
        return dside, flatten(_call(function, dside, seed, need_grad, call.autocast)), None
    except Exception as error:  # noqa: BLE001
        return None, [], f"The run in the dumped dtypes on {device} raises {_error_text(error)}"


def _run_backward(runs: Runs, call: DumpedCall, source: Source, bench: _Side, bench_out: List[Any],
                  dside: Optional[_Side], device_out: List[Any], device: str) -> None:
    """Both backward sides into ``runs`` (the device's from the dump when it has no side of its own:
    ``dumped_outputs``), or ``runs.backward_skip`` saying why not."""
    try:
        runs.backward_bench = _backward(bench, bench_out, runs.grads, True, "cpu")
        if dside is None:
            recorded = recorded_values(call.backward.get("output"), source, call.full_name + ".backward.output")
            runs.backward_device = {index: (recorded[index] if index < len(recorded) else None)
                                    for index in runs.backward_bench}
        else:
            device_grads = _backward(dside, device_out, runs.grads, False, device)
            runs.backward_device = {index: (None if grad is None else grad.cpu())
                                    for index, grad in device_grads.items()}
    except (Unrunnable, MissingInput) as error:
        runs.backward_skip = str(error)
    except Exception as error:  # noqa: BLE001
        runs.backward_skip = f"The backward re-run raises {_error_text(error)}"
