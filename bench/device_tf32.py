"""What the advisor answers for CPU float32 against an accelerator's float32, with TF32 off and on.

    python bench/device_tf32.py [--device cuda] [--models cnn,gpt]

Each run is a fresh process: seed_all, the model built on the CPU (same weights in every run), moved to the
device, one forward and backward dumped with the legacy calls (``mode="api_stack"``: npy files and stacks). The CPU run is the
bench side; the device runs with ``torch.backends.cuda.matmul.allow_tf32`` and ``cudnn.allow_tf32`` off, then
on, are the "NPU" side. For each pair the script prints compare's outcome and the first lines of the advisor
file. What a user should read: TF32 off, no failure; TF32 on, the first conv2d / matmul-class call named.

Models: ``cnn`` is torchvision's resnet18 (10 classes, 64x64 images) when torchvision is installed, else a
small conv-BN-ReLU stack with a residual; ``gpt`` is transformers' GPT-2 (2 layers, width 128) when
transformers is installed (skipped otherwise).
"""

from __future__ import annotations

import argparse
import csv
import glob
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def build(name: str):
    """The model and a function giving its loss on fixed inputs (on ``device``)."""
    import torch

    if name == "cnn":
        try:
            import torchvision

            model = torchvision.models.resnet18(num_classes=10)
        except ImportError:
            model = torch.nn.Sequential(
                torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
        images = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(1))
        labels = torch.arange(4) % 10

        def loss(net, device):
            return torch.nn.functional.cross_entropy(net(images.to(device)), labels.to(device))

        return model, loss
    if name == "gpt":
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=64,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(config)
        ids = torch.randint(0, 1000, (2, 32), generator=torch.Generator().manual_seed(1))

        def loss(net, device):
            return net(input_ids=ids.to(device), labels=ids.to(device)).loss

        return model, loss
    raise SystemExit(f"unknown model {name!r}")


def child(model_name: str, device: str, tf32: bool, out: str) -> None:
    sys.path.insert(0, ROOT)
    import torch

    from ptdbg_ascend import acc_cmp_dump, register_hook, seed_all, set_dump_path, set_dump_switch

    seed_all(1234)
    model, loss = build(model_name)
    model = model.to(device)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    set_dump_path(os.path.join(out, "dump.pkl"), dump_tag="run")
    register_hook(model, acc_cmp_dump)
    set_dump_switch("ON", mode="api_stack")
    loss(model, device).backward()
    set_dump_switch("OFF")


def run(model_name: str, device: str, tf32: bool, out: str) -> str:
    """A fresh process dumping one run; the path of its pkl."""
    code = "import sys; sys.path.insert(0, {!r}); import device_tf32 as d; d.child({!r}, {!r}, {!r}, {!r})".format(
        HERE, model_name, device, tf32, out)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{model_name} on {device} failed:\n{done.stderr[-3000:]}")
    return sorted(glob.glob(os.path.join(out, "run_v*", "rank*", "*.pkl")))[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the accelerator (default cuda)")
    parser.add_argument("--models", default="cnn,gpt", help="comma-separated: cnn, gpt (default both)")
    args = parser.parse_args()
    sys.path.insert(0, ROOT)
    from ptdbg_ascend import compare

    work = tempfile.mkdtemp(prefix="device_tf32_")
    for model_name in args.models.split(","):
        if model_name == "gpt" and importlib.util.find_spec("transformers") is None:
            print("gpt: transformers is not installed, skipped")
            continue
        bench = run(model_name, "cpu", False, os.path.join(work, model_name, "cpu"))
        for tf32 in (False, True):
            label = f"{args.device}_tf32_{'on' if tf32 else 'off'}"
            npu = run(model_name, args.device, tf32, os.path.join(work, model_name, label))
            out = os.path.join(work, model_name, label + "_compare")
            os.makedirs(out)
            outcome = compare({"npu_pkl_path": npu, "bench_pkl_path": bench, "npu_dump_data_dir": npu[:-4],
                               "bench_dump_data_dir": bench[:-4], "is_print_compare_log": False}, out,
                              stack_mode=True, xlsx=False)
            print(f"== {model_name}: {label} vs cpu float32 ==")
            print(str(outcome))
            advisor = sorted(glob.glob(os.path.join(out, "advisor_*.txt")))
            if advisor:
                with open(advisor[0], encoding="utf-8") as handle:
                    print("".join(handle.readlines()[:8]).rstrip())
            with open(sorted(glob.glob(os.path.join(out, "compare_result_*.csv")))[0], encoding="utf-8") as handle:
                table = list(csv.reader(handle))
            result, message = table[0].index("Result"), table[0].index("Err_message")
            failing = [row for row in table[1:] if row[result] == "error"]
            for row in failing[:12]:
                print(f"  failing: {row[0]}  {row[message][:150]}")
            finding = sorted(glob.glob(os.path.join(out, "compare_finding_*.json")))
            if finding:
                with open(finding[0], encoding="utf-8") as handle:
                    print("finding:", json.dumps({k: v for k, v in json.load(handle).items()
                                                  if k in ("kind", "call", "user_line")}))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
