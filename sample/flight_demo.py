"""The flight recorder on CPU: 20 training steps, a NaN planted at step 13, and only the last steps are written.

    python sample/flight_demo.py [--out sample/out/flight_demo] [--steps 20] [--bad-step 13] [--last-steps 4]

A small transformer classifier trained with AdamW under ``FlightRecorder(out, last_steps=4)``. Nothing is written
while training is healthy. At step ``--bad-step`` one weight of the classifier head turns NaN (think: a corrupt
update); the recorder finds the first API whose output is NaN at the end of that step, writes the last
``--last-steps`` steps as ordinary dumps (``step{N}/rank/dump.json`` + ``stack.json``) and ``trigger.json``, and
stops training with ``FlightRecorderTriggered``. The demo lists the files and prints trigger.json.
"""

from __future__ import annotations

import argparse
import os

import torch

from ptdbg_ascend import FlightRecorder, FlightRecorderTriggered


class Classifier(torch.nn.Module):
    """embedding -> one transformer encoder layer -> mean over tokens -> linear head."""

    def __init__(self, vocab: int = 50, width: int = 32) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, width)
        self.encoder = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=64, dropout=0.0,
                                                        batch_first=True)
        self.head = torch.nn.Linear(width, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embedding(tokens)).mean(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("sample", "out", "flight_demo"), help="the recorder's dump_path")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bad-step", type=int, default=13, help="the step at which a head weight turns NaN")
    parser.add_argument("--last-steps", type=int, default=4)
    options = parser.parse_args()

    torch.manual_seed(0)
    model = Classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(1)
    try:
        with FlightRecorder(options.out, last_steps=options.last_steps) as recorder:
            for step in range(options.steps):
                tokens = torch.randint(0, 50, (8, 12), generator=generator)
                labels = torch.randint(0, 3, (8,), generator=generator)
                if step == options.bad_step:
                    model.head.weight.data.numpy()[0, 0] = float("nan")  # written through numpy: no torch call
                loss = torch.nn.functional.cross_entropy(model(tokens), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                recorder.step(loss)
        print(f"no trigger in {options.steps} steps; nothing was written")
        return
    except FlightRecorderTriggered as stop:
        print(stop)
    for folder, _, names in sorted(os.walk(options.out)):
        for name in sorted(names):
            print(os.path.join(folder, name))
    with open(os.path.join(options.out, "trigger.json"), encoding="utf-8") as handle:
        print(handle.read())


if __name__ == "__main__":
    main()
