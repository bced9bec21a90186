"""Backward capture on the awkward cases: in-place ops, views, tuple outputs, no_grad, x * x."""

from __future__ import annotations

import torch

from ptdbg_ascend.dump.observers import CallObserver


class Collect(CallObserver):
    def __init__(self):
        self.forward = []
        self.backward = {}

    def wants_forward(self, call):
        return True

    def wants_backward(self, call):
        return True

    def on_forward(self, call, args, kwargs, output):
        self.forward.append(call.forward_name)

    def on_backward(self, call, backward_input, backward_output):
        self.backward[call.backward_name] = (
            [None if g is None else g.clone() for g in backward_input],
            [None if g is None else g.clone() for g in backward_output],
        )


def _observe(dump_session, extra_apis=None):
    dump_session.ensure_wrapped(extra_apis)
    observer = Collect()
    dump_session.add_observer(observer)
    return observer


def test_tensor_passed_twice_gets_one_gradient_per_position(dump_session):
    observer = _observe(dump_session)
    try:
        x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = torch.mul(x, x)
        y.sum().backward()
    finally:
        dump_session.remove_observer(observer)
    grad_in, grad_out = observer.backward["Torch_mul_0_backward"]
    assert torch.equal(grad_in[0], torch.ones(3))
    assert torch.equal(grad_out[0], x.detach()) and torch.equal(grad_out[1], x.detach())
    assert torch.equal(x.grad, 2 * x.detach())  # the training result is untouched


def test_inplace_view_tuple_and_no_grad(dump_session):
    observer = _observe(dump_session, extra_apis=True)  # Tensor.view, torch.split: not in the original 4.0's list
    try:
        w = torch.tensor([[1.0, -2.0], [3.0, -4.0]], requires_grad=True)
        h = w * 2                         # Tensor___mul___0
        v = h.view(4)                     # Tensor_view_0 (a view)
        v.add_(1.0)                       # Tensor_add__0, in place on a view
        first, second = torch.split(v, 2)  # Torch_split_0, tuple output
        with torch.no_grad():
            torch.relu(first)              # recorded forward, no backward
        loss = (first * 3).sum() + second.sum()
        loss.backward()
    finally:
        dump_session.remove_observer(observer)
    assert "Torch_relu_0_forward" in observer.forward
    assert "Torch_relu_0_backward" not in observer.backward
    grad_in, grad_out = observer.backward["Torch_split_0_backward"]
    assert torch.equal(grad_in[0], torch.full((2,), 3.0)) and torch.equal(grad_in[1], torch.ones(2))
    assert torch.equal(grad_out[0], torch.tensor([3.0, 3.0, 1.0, 1.0]))
    grad_in, grad_out = observer.backward["Tensor___mul___0_backward"]
    assert torch.equal(grad_out[0], torch.tensor([[6.0, 6.0], [2.0, 2.0]]))
    assert torch.equal(w.grad, torch.tensor([[6.0, 6.0], [2.0, 2.0]]))
    assert "Tensor_add__0_backward" in observer.backward


def test_nested_calls_are_not_recorded_and_counters_count_every_call(dump_session):
    dump_session.ensure_wrapped()
    torch.nn.functional.relu(torch.ones(2))  # switch off: still counted
    observer = _observe(dump_session)
    try:
        torch.nn.functional.relu(torch.ones(2))
    finally:
        dump_session.remove_observer(observer)
    assert observer.forward == ["Functional_relu_1_forward"]  # F.relu calls torch.relu inside: invisible


def test_call_tensors_finds_every_tensor_in_argument_order():
    """The inputs scanned for autograd edges: the flat case and every nesting give the tensors depth first, in
    argument order (keywords after positionals), nothing else."""
    from ptdbg_ascend.dump.capture import call_tensors

    a, b, c, d, e = (torch.ones(1) * k for k in range(5))
    assert [id(t) for t in call_tensors((a, 2, "x", b), {})] == [id(a), id(b)]
    assert [id(t) for t in call_tensors((a,), {"other": b, "alpha": 1.5})] == [id(a), id(b)]
    nested = call_tensors((a, [b, (c, 3)], {"k": d}), {"out": e, "dims": (0, 1)})
    assert [id(t) for t in nested] == [id(a), id(b), id(c), id(d), id(e)]
    assert [id(t) for t in call_tensors((a,), {"tensors": [b, c]})] == [id(a), id(b), id(c)]
    assert call_tensors((), {}) == [] and call_tensors((1, None), {"x": "y"}) == []
