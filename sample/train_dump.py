"""Dump a small CPU training run in api_stack mode, then show what was written.

    python sample/train_dump.py [--out sample/out/train_dump] [--steps 2] [--summary-only]

A conv + transformer-style model, a DataLoader with two worker processes (their tensor work is not
recorded), AdamW, two steps. Prints the files, the first records of the first conv and the record count.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from ptdbg_ascend import *  # noqa: F401,F403  (the legacy API, as the user guide writes it)


class Images(torch.utils.data.Dataset):
    """Eight fixed random 3x16x16 images with labels."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randn(8, 3, 16, 16, generator=generator)
        self.labels = torch.randint(0, 4, (8,), generator=generator)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        return self.images[index] * 0.5, self.labels[index]  # runs in a worker: not recorded


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv(x)).flatten(2).transpose(1, 2)
        x = self.norm(x + self.attention(x, x, x, need_weights=False)[0])
        return self.head(x.mean(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "out", "train_dump"),
                        help="directory for the dump (default sample/out/train_dump)")
    parser.add_argument("--steps", type=int, default=2, help="training steps (default 2)")
    parser.add_argument("--summary-only", action="store_true", help="statistics only, no npy files")
    args = parser.parse_args()

    seed_all()
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(Images(), batch_size=4, num_workers=2)

    set_dump_path(os.path.join(args.out, "npu_dump.pkl"), dump_tag="ptdbg_dump")
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack", summary_only=args.summary_only)
    for step, (images, labels) in enumerate(loader):
        if step == args.steps:
            break
        loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    set_dump_switch("OFF")

    rank_dir = os.path.join(args.out, "ptdbg_dump_v1.0", "rank0")
    pkl = os.path.join(rank_dir, "api_stack_npu_dump.pkl")
    with open(pkl, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    print(f"\nFiles in {rank_dir}: {sorted(os.listdir(rank_dir))}")
    print(f"{len(records)} pkl lines ({sum((1 for r in records if r[0].endswith('_stack_info')))} stack lines)")
    for record in records:
        if record[0].startswith("Functional_conv2d_0_") and not record[0].endswith("_stack_info"):
            print(f"  {record}")


if __name__ == "__main__":
    main()
