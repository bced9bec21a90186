"""One side of the reentrant-checkpointing tests: a GPT-like stack of two blocks trained for two SGD steps on
CPU, each block run plainly or under ``torch.utils.checkpoint.checkpoint`` (Megatron-style reentrant, or
non-reentrant), dumped by the legacy calls or by ``PrecisionDebugger`` (L1, tensors).

    python checkpoint_run.py OUT SIDE MODE FRONT [plant]

MODE is ``reentrant``, ``nonreentrant`` or ``plain``; FRONT ``legacy`` (``OUT/<SIDE>_dump.pkl``) or ``debugger``
(``OUT/<SIDE>/step0/rank/dump.json``). ``plant`` makes the second block's fc1 linear 1% off on every call (its
first pass, its re-computation and the next step), inside the wrapped ``F.linear`` like a buggy kernel.
"""

from __future__ import annotations

import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

OUT, SIDE, MODE, FRONT = sys.argv[1:5]
PLANTED = []  # the weight whose linear is planted (set once the model exists)

if len(sys.argv) > 5 and sys.argv[5] == "plant":  # before ptdbg_ascend wraps F.linear
    _linear = F.linear

    def buggy_linear(x, weight, bias=None):
        output = _linear(x, weight, bias)
        return output * 1.01 if PLANTED and weight is PLANTED[0] else output

    F.linear = buggy_linear


class Block(nn.Module):
    """Pre-norm attention and MLP with residuals (GPT-2's layout)."""

    def __init__(self, d_model: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        batch, seq, d_model = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(batch, seq, self.heads, d_model // self.heads).transpose(1, 2) for t in (q, k, v))
        attention = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d_model // self.heads), dim=-1)
        x = x + self.proj(torch.matmul(attention, v).transpose(1, 2).reshape(batch, seq, d_model))
        h = self.fc1(self.ln2(x))  # plant site
        return x + self.fc2(F.gelu(h))


class GPT(nn.Module):
    def __init__(self, vocab: int = 32, d_model: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model) for _ in range(2))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            if MODE == "plain":
                x = block(x)
            else:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=MODE == "reentrant")
        return self.head(self.ln_f(x))


def main() -> int:
    torch.set_num_threads(1)
    from ptdbg_ascend import PrecisionDebugger, acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch

    seed_all()
    model = GPT()
    PLANTED.append(model.blocks[1].fc1.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    tokens, target = torch.randint(0, 32, (2, 8)), torch.randint(0, 32, (2, 8))
    os.makedirs(OUT, exist_ok=True)
    if FRONT == "legacy":
        set_dump_path(os.path.join(os.path.abspath(OUT), SIDE + "_dump.pkl"))
        register_hook(model, acc_cmp_dump)
        set_dump_switch("ON", mode="api_stack")
    else:
        debugger = PrecisionDebugger(task="tensor", dump_path=os.path.join(OUT, SIDE))
        debugger.start()
    for _ in range(2):
        optimizer.zero_grad()
        F.cross_entropy(model(tokens).reshape(-1, 32), target.reshape(-1)).backward()
        optimizer.step()
    if FRONT == "legacy":
        set_dump_switch("OFF")
    else:
        debugger.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
