"""A small CPU training script instrumented with the legacy API, exactly as the README shows.

    mkdir -p npu gpu
    (cd npu && python ../sample/legacy_train.py --bf16-layer)   # run A -> npu/ptdbg_dump_v1.0/rank0/api_stack_dump.pkl
    (cd gpu && python ../sample/legacy_train.py)                # run B -> gpu/ptdbg_dump_v1.0/rank0/api_stack_dump.pkl

The dump goes under the directory it is run from (``set_dump_path("./dump.pkl")``, a literal, so that
``ptdbg migrate sample/legacy_train.py`` can compute the config from it). With ``--bf16-layer`` the second
linear layer computes in bfloat16 through a faulty device kernel that also *accumulates* in bfloat16, cutting
each of its 32 partial sums toward zero to bfloat16 (a correct kernel keeps them in float32): the planted
difference that ``end_to_end.py`` expects the comparison to find (about 4 % off). A bfloat16 layer that
accumulates in float32 would be within what bfloat16 explains, and the compare would only note where the
precision drops.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def install_bf16_accumulating_linear() -> None:
    """Stand in for a faulty device kernel: ``F.linear`` on bfloat16 tensors adds up its products one by one,
    cutting every partial sum toward zero to bfloat16. Installed before ``ptdbg_ascend`` wraps ``F.linear``,
    so the dump records it as the one API call it is on a device (what runs inside a wrapped API is not
    recorded)."""
    exact = F.linear

    def linear(x, weight, bias=None):
        if x.dtype != torch.bfloat16:
            return exact(x, weight, bias)
        products = (x.unsqueeze(-2) * weight).float()  # (..., out, in), each product rounded to bfloat16
        total = torch.zeros(products.shape[:-1])
        for k in range(products.shape[-1]):
            exact_sum = total + products[..., k]
            cut = (exact_sum.detach().view(torch.int32) & -65536).view(torch.float32)  # the bug: truncated
            total = exact_sum + (cut - exact_sum.detach())  # gradients flow as through the exact sum
        total = total.bfloat16()
        return total if bias is None else total + bias

    F.linear = linear


if "--bf16-layer" in sys.argv:  # the NPU run of the sample: its device kernel, before the dump wraps torch
    install_bf16_accumulating_linear()

from ptdbg_ascend import *  # noqa: E402,F401,F403  (the legacy API, as users write it)


class SmallNet(nn.Module):
    """A conv stem, a linear block and a classifier: enough APIs to make the comparison interesting."""

    def __init__(self, bf16_layer: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, 10)
        self.bf16_layer = bf16_layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.norm(self.conv(x)))
        x = F.adaptive_avg_pool2d(x, 4).flatten(1)
        x = torch.tanh(self.fc1(x))
        if self.bf16_layer:
            # The planted difference: this layer runs in bfloat16 on the "device" side.
            x = F.linear(x.bfloat16(), self.fc2.weight.bfloat16(), self.fc2.bias.bfloat16()).float()
        else:
            x = F.linear(x, self.fc2.weight, self.fc2.bias)
        return self.head(F.gelu(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1, help="training steps to dump (default 1)")
    parser.add_argument("--bf16-layer", action="store_true",
                        help="plant a bfloat16 layer whose device kernel accumulates in bfloat16")
    args = parser.parse_args()

    seed_all()
    model = SmallNet(args.bf16_layer)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    images = torch.randn(4, 3, 8, 8)
    labels = torch.randint(0, 10, (4,))

    set_dump_path("./dump.pkl")   # -> ./ptdbg_dump_v1.0/rank0/api_stack_dump.pkl
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
    set_dump_switch("OFF")
    print(f"loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
