"""free_benchmark at ``fuzz_stage: "backward"``: a call's input gradients recomputed from perturbed inputs.

The call is rebuilt on perturbed copies of its forward inputs (new leaves; the script's tensors are not touched),
and ``torch.autograd.grad`` takes it back with the gradients that really arrived at its outputs (cast to the
perturbed outputs' dtype: ``improve_precision`` runs the backward in float32 too). The result pairs each input
gradient autograd really computed with the perturbed one, by input index.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.free_benchmark.perturb import NotPerturbed, map_tensors, perturbed_inputs


def perturbed_gradients(original: Callable[..., Any], mode: str, args: Tuple[Any, ...], kwargs: Dict[str, Any],
                        output_grads: Sequence[Optional[Any]], input_grads: Sequence[Optional[Any]]
                        ) -> List[Tuple[Optional[int], Any, Any]]:
    """``(input index, real gradient, perturbed gradient)`` for each input that got a gradient.

    :raises NotPerturbed: nothing to perturb, or no input or output of the call takes part in the gradient.
    """
    import torch

    with torch.no_grad():
        new_args, new_kwargs = perturbed_inputs(mode, args, kwargs, copy_all=True)
    leaves: List[Tuple[int, Any]] = []
    position = [0]

    def leaf(tensor: Any) -> Any:
        index = position[0]
        position[0] += 1
        wanted = index < len(input_grads) and input_grads[index] is not None and tensor.is_floating_point()
        if not wanted:
            return tensor.detach()
        made = tensor.detach().requires_grad_(True)
        leaves.append((index, made))
        return made

    new_args, new_kwargs = map_tensors((new_args, new_kwargs), leaf)
    if not leaves:
        raise NotPerturbed("no input of the call got a gradient")
    with torch.enable_grad():
        output = original(*new_args, **new_kwargs)
    outputs: List[Any] = []
    map_tensors(output, lambda tensor: outputs.append(tensor) or tensor)
    roots, seeds = [], []
    for index, tensor in enumerate(outputs):
        gradient = output_grads[index] if index < len(output_grads) else None
        if gradient is not None and tensor.requires_grad and tensor.shape == gradient.shape:
            roots.append(tensor)
            seeds.append(gradient.detach().to(device=tensor.device, dtype=tensor.dtype))
    if not roots:
        raise NotPerturbed("no output of the perturbed run takes part in the gradient")
    gradients = torch.autograd.grad(roots, [made for _, made in leaves], grad_outputs=seeds, allow_unused=True)
    return [(index, input_grads[index], gradient) for (index, _), gradient in zip(leaves, gradients)
            if gradient is not None and gradient.shape == input_grads[index].shape]
