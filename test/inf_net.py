"""A small model whose dump holds inf and NaN (the ``*_except_inf_nan`` keys), an int tensor and, optionally, a
float64 one: the device-statistics and fused-queue tests dump it on every path and compare the files."""

import torch


class InfNet(torch.nn.Module):
    """linear -> a division by a tensor with a zero (inf and nan) -> relu, an int tensor through the dump (argmax)
    and, with ``float64`` (default False), a float64 one (exp of the linear's output as double)."""

    def __init__(self, float64: bool = False) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(6, 4)
        self.float64 = float64

    def forward(self, x):
        y = self.fc(x)
        z = y / torch.tensor([1.0, 0.0, 2.0, 4.0])
        torch.argmax(y, dim=1)
        if self.float64:
            torch.exp(y.double())
        return torch.relu(y).sum() + torch.nan_to_num(z, posinf=0.0, neginf=0.0, nan=0.0).sum()
