"""One side of a reduced-precision scenario: a small real model trained for a few CPU steps under the legacy dump.

    python precision_runs.py --model resnet|gpt|mlp|bn_block --side npu|bench --out DIR [--tf32] [--threads N]

``--tf32`` emulates TF32/HF32 on this side: conv2d, linear and matmul round their float32 inputs to a 10-bit
mantissa (round to nearest, the low 13 bits of the float32 pattern cleared) and compute in float32, as an
accelerator's TF32 mode does. The rounding replaces the API *before* ``ptdbg_ascend`` is imported, so it happens
inside the dumped call: the dump holds the exact float32 inputs and the reduced-precision output, under the API's
own name. Prints ``step N loss L`` per step.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = ("resnet", "gpt", "mlp", "bn_block")
MANTISSA_DROP = 13  # float32 keeps 23 mantissa bits, TF32 10


def tf32(tensor):
    """``tensor`` rounded to a 10-bit mantissa (float32 only); gradients pass straight through."""
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
        return tensor
    with torch.no_grad():
        bits = tensor.detach().contiguous().view(torch.int32)
        rounded = ((bits + (1 << (MANTISSA_DROP - 1))) & ~((1 << MANTISSA_DROP) - 1)).view(torch.float32)
    return tensor + (rounded - tensor).detach()


def install_tf32():
    """conv2d, linear and matmul of this process compute from TF32-rounded inputs."""
    for owner, attr in ((F, "conv2d"), (F, "linear"), (torch, "matmul")):
        original = getattr(owner, attr)

        def reduced(*args, _original=original, **kwargs):
            return _original(*(tf32(arg) for arg in args), **kwargs)

        setattr(owner, attr, reduced)


class ResNetLike(nn.Module):
    """A resnet-like stem: conv-BN-ReLU, a residual conv-BN-ReLU-conv-BN block, pooling, a classifier."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))  # root site: resnet
        y = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(x + self.bn3(self.conv3(y)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class GPTLike(nn.Module):
    """A GPT-like block on embeddings: layer_norm, qkv projection, causal softmax attention, MLP, head."""

    def __init__(self, vocab=64, d_model=64, heads=4):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, d_model)
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)  # root site: gpt
        q, k, v = (t.reshape(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        mask = torch.ones(seq, seq, dtype=torch.bool).tril()
        attention = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = torch.matmul(attention, v).transpose(1, 2).reshape(batch, seq, d_model)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(self.ln_f(x))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))  # root site: mlp
        return self.head(torch.tanh(self.fc2(h)))


class BNBlock(nn.Module):
    """BN -> 1x1 conv -> BN, as in mobile CNNs: the first BN's bias gradient is mathematically zero."""

    def __init__(self):
        super().__init__()
        self.conv0 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pointwise = nn.Conv2d(8, 16, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.bn2(self.pointwise(self.bn1(self.conv0(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(F.relu(x), 1), 1))


def build(model_name):
    """``(model, batch, loss_fn)``."""
    if model_name == "resnet":
        # Pixel values with an offset, as unnormalised images have: the convolutions' outputs have a mean
        # several times their spread, which BatchNorm removes (and so makes their rounding error visible).
        images = 1.0 + 0.25 * torch.rand(8, 3, 12, 12)
        return ResNetLike(), (images, torch.randint(0, 10, (8,))), F.cross_entropy
    if model_name == "gpt":
        tokens = torch.randint(0, 64, (4, 16))
        model = GPTLike()
        # Trained attention is sharp: larger query/key weights give logits of ~10, where softmax shows
        # the logits' absolute rounding error.
        with torch.no_grad():
            model.qkv.weight.mul_(4.0)

        def lm_loss(output, target):
            return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))

        return model, (tokens, torch.randint(0, 64, (4, 16))), lm_loss
    if model_name == "mlp":
        return MLP(), (torch.randn(8, 16), torch.randint(0, 4, (8,))), F.cross_entropy
    return BNBlock(), (torch.randn(16, 3, 8, 8), torch.randint(0, 10, (16,))), F.cross_entropy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--side", required=True, choices=("npu", "bench"))
    parser.add_argument("--out", required=True, help="directory of this side's dump")
    parser.add_argument("--tf32", action="store_true", help="emulate TF32 in conv2d/linear/matmul")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--steps", type=int, default=2, help="training steps to dump (default 2)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.tf32:
        install_tf32()

    from ptdbg_ascend import acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch

    seed_all()
    model, (inputs, target), loss_fn = build(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    os.makedirs(args.out, exist_ok=True)
    set_dump_path(os.path.join(os.path.abspath(args.out), args.side + "_dump.pkl"))
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    for step in range(args.steps):
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), target)
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.8f}", flush=True)
    set_dump_switch("OFF")
    return 0


if __name__ == "__main__":
    sys.exit(main())
