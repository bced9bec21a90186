"""One side of a compare scenario: a small real model trained for a few CPU steps under the legacy dump.

    python train_scenario.py --scenario NAME --side npu|bench --out DIR [--steps 2]

Writes ``DIR/ptdbg_dump_v*/rank0/api_stack_<side>_dump.pkl`` and the same-named npy directory
(``set_dump_path(DIR/<side>_dump.pkl)``, mode ``api_stack``), prints ``step N loss L`` per step and, on
a planted npu run, ``DIR/plant.json``: the planted API, the code text of the model line that calls it,
and the statistics of the first output it corrupted, so a test can find the planted call's NPU name in
the dump itself (``<api>_<n>_forward_output`` with those statistics).

The bench side is the clean run; the npu side carries the plant. Plants that corrupt a torch API replace
that API *before* ``ptdbg_ascend`` is imported, so the tool wraps the buggy function the way it would wrap
a buggy kernel: the corruption happens inside the wrapped call, adds no dumped API, and the dump records
the wrong output under the API's own name.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

SCENARIOS = ("extra_call", "checkpoint", "inplace_relu", "scale", "every_fifth", "autocast", "conv_bn",
             "equal_runs")

# The first corrupted output of the npu run: {"api", "code", "index", "shape", "dtype", "max", "min"}.
PLANT = {}


def record_plant(api, code, index, output):
    """Remember the first planted output (its statistics identify the call in the dump); returns it."""
    if not PLANT:
        values = output.detach().double()
        PLANT.update(api=api, code=code, index=index, shape=list(output.shape), dtype=str(output.dtype),
                     max=values.max().item(), min=values.min().item())
    return output


def plant_output(owner, attr, api, code, corrupt, at=None, when=None):
    """Replace ``owner.attr`` by a version whose ``at``-th call (every call when None; only calls whose
    arguments satisfy ``when``) returns ``corrupt(output)``; ``api`` is the dump name of the API without
    counter, ``code`` the text of the model line that calls it. Runs inside the tool's wrapper, so the
    torch calls made here are neither dumped nor counted."""
    original = getattr(owner, attr)
    calls = [0]

    def planted(*args, **kwargs):
        index = calls[0]
        calls[0] += 1
        output = original(*args, **kwargs)
        if (at is None or index == at) and (when is None or when(args)):
            output = corrupt(output)
            record_plant(api, code, index, output)
        return output

    setattr(owner, attr, planted)


def every_fifth(output):
    """A wrong value in every 5th element (+0.5), out of place."""
    bump = torch.zeros(output.numel(), dtype=output.dtype)
    bump[::5] = 0.5
    return output + bump.view_as(output)


def install_plant(scenario):
    """The npu side's buggy API (before ptdbg_ascend wraps torch)."""
    if scenario == "extra_call":  # the 3rd F.relu of the run: the 2nd of the model, after the extra one
        plant_output(F, "relu", "Functional_relu", "F.relu(self.fc2(h))", lambda out: out * 1.02, at=2)
    elif scenario == "inplace_relu":  # a buggy in-place kernel: clamps at 0.05 instead of 0, on every call
        clamp_ = torch.Tensor.clamp_
        calls = [0]

        def buggy_relu_(self):
            calls[0] += 1
            return record_plant("Tensor_relu_", "h.relu_()", calls[0] - 1, clamp_(self, min=0.05))

        torch.Tensor.relu_ = buggy_relu_
    elif scenario == "scale":  # the 2nd F.linear (fc2)
        plant_output(F, "linear", "Functional_linear", "self.fc2(h)", lambda out: out * 1.02, at=1)
    elif scenario == "every_fifth":  # the first F.layer_norm
        plant_output(F, "layer_norm", "Functional_layer_norm", "self.norm(h)", every_fifth, at=0)
    elif scenario == "conv_bn":  # the model casts the layer itself; this only records which call it was
        plant_output(F, "linear", "Functional_linear", "F.linear(x.bfloat16()", lambda out: out,
                     when=lambda args: args[0].dtype == torch.bfloat16)


class ExtraCallNet(nn.Module):
    """MLP on a positive input; the npu run makes one extra, harmless F.relu on it first."""

    def __init__(self, extra):
        super().__init__()
        self.extra = extra
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        if self.extra:
            x = F.relu(x)  # npu only: the input is positive, so nothing changes but the call counter
        h = F.relu(self.fc1(x))
        h = F.relu(self.fc2(h))  # plant site: extra_call
        return self.fc3(h)


class CheckpointNet(nn.Module):
    """fc -> [linear, gelu, linear] block -> head; the npu run checkpoints the block."""

    def __init__(self, checkpointed):
        super().__init__()
        self.checkpointed = checkpointed
        self.fc1 = nn.Linear(16, 32)
        self.block = nn.Sequential(nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 32))
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        if self.checkpointed:  # the block's forward runs again during backward
            h = torch.utils.checkpoint.checkpoint(self.block, h, use_reentrant=False)
        else:
            h = self.block(h)
        return self.head(torch.tanh(h))


class InplaceNet(nn.Module):
    """linear -> in-place relu -> linear -> head."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.fc1(x)
        h.relu_()  # plant site: inplace_relu
        h = torch.tanh(self.fc2(h))
        return self.head(h)


class NormNet(nn.Module):
    """fp32 MLP with a LayerNorm: linear -> layer_norm -> gelu -> linear -> tanh -> head."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.fc2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = self.fc1(x)
        h = self.norm(h)  # plant site: every_fifth
        h = F.gelu(h)
        h = self.fc2(h)  # plant site: scale
        h = torch.tanh(h)
        return self.head(h)


class TransformerNet(nn.Module):
    """embedding -> pre-norm block (2-head self-attention + GELU MLP) -> LayerNorm -> vocabulary head."""

    def __init__(self, vocab=50, d_model=32, heads=2):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d_model)
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 2 * d_model)
        self.fc2 = nn.Linear(2 * d_model, d_model)
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, seq, self.heads, d_model // self.heads).transpose(1, 2) for t in (q, k, v))
        attention = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_model // self.heads), dim=-1)
        y = torch.matmul(attention, v).transpose(1, 2).reshape(batch, seq, d_model)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(self.ln_f(x))


class ConvBNNet(nn.Module):
    """conv -> BatchNorm -> relu -> flatten -> linear -> tanh -> linear -> head; the npu run computes the
    second linear in bfloat16 (cast in, cast out). The conv bias gradient is mathematically zero (BatchNorm
    removes the per-channel mean), so both sides only hold rounding noise there."""

    def __init__(self, bf16_layer):
        super().__init__()
        self.bf16_layer = bf16_layer
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc1 = nn.Linear(8 * 6 * 6, 32)
        self.fc2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = torch.tanh(self.fc1(x.flatten(1)))
        if self.bf16_layer:
            x = F.linear(x.bfloat16(), self.fc2.weight.bfloat16(), self.fc2.bias.bfloat16()).float()  # plant site: conv_bn
        else:
            x = F.linear(x, self.fc2.weight, self.fc2.bias)
        return self.head(F.gelu(x))


def build(scenario, planted):
    """``(model, optimizer, batch, loss_fn, forward_context)`` for a scenario; ``planted`` = npu side."""
    if scenario == "extra_call":
        model = ExtraCallNet(extra=planted)
        batch = (torch.rand(4, 16), torch.randint(0, 4, (4,)))  # positive input (like images in [0, 1))
    elif scenario == "checkpoint":
        model = CheckpointNet(checkpointed=planted)
        batch = (torch.randn(4, 16), torch.randint(0, 4, (4,)))
    elif scenario == "inplace_relu":
        model = InplaceNet()
        batch = (torch.randn(4, 16), torch.randint(0, 4, (4,)))
    elif scenario in ("scale", "every_fifth", "equal_runs"):
        model = NormNet()
        batch = (torch.randn(4, 16), torch.randint(0, 4, (4,)))
    elif scenario == "autocast":
        model = TransformerNet()
        tokens = torch.randint(0, 50, (2, 8))
        batch = (tokens, torch.randint(0, 50, (2, 8)))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def autocast_loss(output, target):
            return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))

        context = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if planted else None
        return model, optimizer, batch, autocast_loss, context
    elif scenario == "conv_bn":
        model = ConvBNNet(bf16_layer=planted)
        batch = (torch.randn(4, 3, 6, 6), torch.randint(0, 10, (4,)))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}; one of {', '.join(SCENARIOS)}")
    return model, torch.optim.SGD(model.parameters(), lr=0.1), batch, F.cross_entropy, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", required=True, choices=SCENARIOS)
    parser.add_argument("--side", required=True, choices=("npu", "bench"))
    parser.add_argument("--out", required=True, help="directory of this side's dump")
    parser.add_argument("--steps", type=int, default=2, help="training steps to dump (default 2)")
    args = parser.parse_args()
    planted = args.side == "npu"
    torch.set_num_threads(1)  # the same kernels on both sides, whatever the machine
    if planted:
        install_plant(args.scenario)

    from ptdbg_ascend import acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch

    seed_all()
    model, optimizer, (inputs, target), loss_fn, context = build(args.scenario, planted)
    os.makedirs(args.out, exist_ok=True)
    set_dump_path(os.path.join(os.path.abspath(args.out), args.side + "_dump.pkl"))
    # conv_bn opts in to the extra APIs (Tensor.float/bfloat16 casts are not in the original 4.0 list), so
    # its dump shows the casts that exist on one side only.
    register_hook(model, acc_cmp_dump, extra_apis=args.scenario == "conv_bn")
    set_dump_switch("ON", mode="api_stack")
    for step in range(args.steps):
        optimizer.zero_grad()
        if context is None:
            loss = loss_fn(model(inputs), target)
        else:
            with context():
                loss = loss_fn(model(inputs), target)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.8f}", flush=True)
    set_dump_switch("OFF")
    if PLANT:
        with open(os.path.join(args.out, "plant.json"), "w") as handle:
            json.dump(PLANT, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
