"""Backward capture: the gradients of one API call, delivered as autograd computes them.

For a recorded call whose output requires grad we need
``backward_input[i]``  = the gradient arriving at output tensor i, and
``backward_output[i]`` = this call's contribution to the gradient of (flattened tensor) input i.

The forward computation is never changed (no identity functions inserted around inputs or outputs,
which would break in-place ops on views). Instead we look at the autograd graph the call created:

* the gradient arriving at output i is ``grad_outputs[output_nr]`` of the output's ``grad_fn``;
* the call's contribution to input i flows along the graph edges that point at input i's gradient
  edge (its ``grad_fn``/``output_nr``, or its ``AccumulateGrad`` node for a leaf). We find those edges
  by walking back from the outputs over the nodes the call created (stopping at the inputs) and hook
  the nodes that own them: ``grad_inputs[k]`` of a node is the gradient sent along edge ``k``.

Node hooks see the gradients without copying them. The call is delivered as soon as every hooked node
ran; if some never runs in a backward pass (a branch without gradient), what was collected is delivered
when the pass ends.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ptdbg_ascend.inside import Inside

# Walk at most this many autograd nodes per call: composite APIs create a handful; the bound keeps a
# call whose graph escapes its inputs (a tensor captured in a closure) from walking the whole model.
MAX_NODES = 128

Deliver = Callable[[List[Optional[Any]], List[Optional[Any]]], None]


def input_edges(tensors: Sequence[Any]) -> List[Optional[Tuple[Any, int]]]:
    """The gradient edge of each input tensor, taken *before* the call runs (an in-place op replaces
    its input's grad_fn). None for a tensor that does not require grad."""
    edges: List[Optional[Tuple[Any, int]]] = []
    for tensor in tensors:
        if not tensor.requires_grad:
            edges.append(None)
        elif tensor.grad_fn is not None:
            edges.append((tensor.grad_fn, tensor.output_nr))
        else:
            try:
                edges.append((_accumulate_grad_node(tensor), 0))
            except (RuntimeError, AttributeError, IndexError):  # a leaf autograd cannot view (sparse...)
                edges.append(None)
    return edges


def _accumulate_grad_node(leaf: Any) -> Any:
    """The AccumulateGrad node of a leaf (autograd creates one per leaf and keeps it while the leaf
    lives, so the node seen here is the one later graphs point at)."""
    return leaf.view_as(leaf).grad_fn.next_functions[0][0]


class BackwardCapture:
    """The hooks of one call. ``deliver(backward_input, backward_output)`` runs once per backward pass."""

    __slots__ = ("outputs", "n_inputs", "deliver", "output_grads", "input_grads", "pending", "hooked", "armed_pass", "on_done")

    def __init__(self, deliver: Deliver, n_inputs: int, outputs: List[Any]) -> None:
        self.deliver = deliver
        self.n_inputs = n_inputs
        self.outputs = [(t.grad_fn, t.output_nr) if t.grad_fn is not None else None for t in outputs]
        self.output_grads: List[Optional[Any]] = [None] * len(outputs)
        self.input_grads: List[Optional[Any]] = [None] * n_inputs
        self.hooked = 0
        self.pending = 0
        self.armed_pass = False

    def reset(self) -> None:
        self.output_grads = [None] * len(self.outputs)
        self.input_grads = [None] * self.n_inputs
        self.pending = self.hooked
        self.armed_pass = False

    def finish(self) -> None:
        if not self.armed_pass:
            return
        backward_input, backward_output = self.output_grads, self.input_grads
        self.reset()
        self.deliver(backward_input, backward_output)


def arm(deliver: Deliver, n_inputs: int, edges: Sequence[Optional[Tuple[Any, int]]],
        outputs: Sequence[Any], max_nodes: int = MAX_NODES) -> Optional[BackwardCapture]:
    """Hook the graph of one call. ``edges`` are the :func:`input_edges` of the ``n_inputs`` flattened
    tensor inputs, ``outputs`` the flattened output tensors. ``deliver`` runs marked as tool code (its
    torch calls are not recorded). Returns None when no output requires grad. ``max_nodes`` bounds the
    walk (default :data:`MAX_NODES`; a whole module's graph needs more than one API's)."""
    output_nodes = [t.grad_fn for t in outputs if t.requires_grad and t.grad_fn is not None]
    if not output_nodes:
        return None
    capture = BackwardCapture(deliver, n_inputs, list(outputs))
    edge_owner: Dict[Tuple[int, int], List[int]] = {}  # (id(node), nr) -> input indices
    keep_alive = []  # the nodes, so their ids stay unique while we walk
    for index, edge in enumerate(edges):
        if edge is not None:
            edge_owner.setdefault((id(edge[0]), edge[1]), []).append(index)
            keep_alive.append(edge[0])
    input_nodes = set(key[0] for key in edge_owner)

    # node -> [(edge position k, input index)]
    node_edges: Dict[int, Tuple[Any, List[Tuple[int, int]]]] = {}
    claimed: Dict[Tuple[int, int], int] = {}  # how many occurrences of an input edge were seen
    seen = set()
    frontier = list(output_nodes)
    visited = 0
    while frontier and visited < max_nodes:
        node = frontier.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        visited += 1
        for position, (next_node, nr) in enumerate(node.next_functions):
            if next_node is None:
                continue
            owners = edge_owner.get((id(next_node), nr))
            if owners is not None:
                occurrence = claimed.get((id(next_node), nr), 0)
                claimed[(id(next_node), nr)] = occurrence + 1
                # The same tensor passed twice (x * x): the k-th edge to it is the k-th argument.
                owner = owners[occurrence % len(owners)]
                node_edges.setdefault(id(node), (node, []))[1].append((position, owner))
            elif id(next_node) not in input_nodes:
                frontier.append(next_node)

    for node in output_nodes:
        node_edges.setdefault(id(node), (node, []))
    output_slots: Dict[int, List[Tuple[int, int]]] = {}  # id(node) -> [(output_nr, output index)]
    for out_index, spec in enumerate(capture.outputs):
        if spec is not None:
            output_slots.setdefault(id(spec[0]), []).append((spec[1], out_index))

    for node_id, (node, positions) in node_edges.items():
        node.register_hook(_node_hook(capture, positions, output_slots.get(node_id, [])))
    capture.hooked = len(node_edges)
    capture.pending = capture.hooked
    return capture


def _node_hook(capture: BackwardCapture, positions: List[Tuple[int, int]],
               output_slots: List[Tuple[int, int]]) -> Callable[..., None]:
    def hook(grad_inputs: Tuple[Any, ...], grad_outputs: Tuple[Any, ...]) -> None:
        # Autograd may run this on its own thread: mark it as tool code there too.
        with Inside():
            _collect(capture, positions, output_slots, grad_inputs, grad_outputs)

    return hook


def _collect(capture: BackwardCapture, positions: List[Tuple[int, int]], output_slots: List[Tuple[int, int]],
             grad_inputs: Tuple[Any, ...], grad_outputs: Tuple[Any, ...]) -> None:
    if not capture.armed_pass:
        capture.armed_pass = True
        _at_end_of_pass(capture)
    for nr, out_index in output_slots:
        if nr < len(grad_outputs):
            capture.output_grads[out_index] = grad_outputs[nr]
    for position, in_index in positions:
        gradient = grad_inputs[position] if position < len(grad_inputs) else None
        if gradient is None:
            continue
        previous = capture.input_grads[in_index]
        capture.input_grads[in_index] = gradient if previous is None else previous + gradient
    capture.pending -= 1
    if capture.pending <= 0:
        capture.finish()


def _at_end_of_pass(capture: BackwardCapture) -> None:
    """Deliver what was collected when the backward pass ends, if some hooked node never ran."""
    try:
        import torch

        def finish_as_tool() -> None:
            with Inside():
                capture.finish()

        torch.autograd.Variable._execution_engine.queue_callback(finish_as_tool)
    except (AttributeError, RuntimeError):
        pass  # old torch: a partly-run capture is delivered at its next pass
