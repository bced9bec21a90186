"""Migration walk-through: a legacy script, its exported config, ``ptdbg migrate``, and the proof that
both versions dump the same numbers.

    python sample/migrate_example.py [--out sample/out/migrate]

Steps (each one is a command a user would type; they run here as subprocesses):
1. ``ptdbg export-config`` runs the legacy script -> legacy/dump/ptdbg_dump_v1.0/rank0/api_stack_npu_dump.pkl
   and writes legacy/exported_config.json (+ the caveats)
2. ``ptdbg migrate --write`` on a copy        -> migrated/train.py + migrated/config.json
3. run the migrated script                    -> migrated/dump/step0/rank/dump.json
4. compare the pkl dump with the dump.json one: every legacy row is matched and reads "Yes".
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import textwrap

LEGACY_SCRIPT = textwrap.dedent("""\
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from ptdbg_ascend import *

    seed_all(seed=1234, rm_dropout=True)
    set_dump_path("./dump/npu_dump.pkl")
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    register_hook(model, acc_cmp_dump)
    images, labels = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    set_dump_switch("ON", mode="api_stack")
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
    set_dump_switch("OFF")
""")


def run(command, cwd):
    print("$ " + " ".join(command))
    subprocess.run(command, cwd=cwd, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("sample", "out", "migrate"), help="work directory (recreated)")
    out = os.path.abspath(parser.parse_args().out)
    shutil.rmtree(out, ignore_errors=True)
    for name in ("legacy", "migrated"):
        os.makedirs(os.path.join(out, name))
        with open(os.path.join(out, name, "train.py"), "w") as handle:
            handle.write(LEGACY_SCRIPT)
    legacy, migrated = os.path.join(out, "legacy"), os.path.join(out, "migrated")
    ptdbg = [sys.executable, "-m", "ptdbg_ascend.cli"]

    # export-config runs the legacy script (which dumps as usual) and then writes its config.
    run(ptdbg + ["export-config", "-o", "exported_config.json", "train.py"], legacy)
    run(ptdbg + ["migrate", "train.py", "--write"], migrated)
    run([sys.executable, "train.py"], migrated)

    from ptdbg_ascend.comparison.api import compare

    rank = os.path.join(legacy, "dump", "ptdbg_dump_v1.0", "rank0")
    os.makedirs(os.path.join(out, "compare"))
    outcome = compare({"npu_pkl_path": os.path.join(rank, "api_stack_npu_dump.pkl"),
                       "npu_dump_data_dir": os.path.join(rank, "api_stack_npu_dump"),
                       "bench_json_path": os.path.join(migrated, "dump", "step0", "rank", "dump.json"),
                       "is_print_compare_log": False}, os.path.join(out, "compare"))
    with open(outcome.csv_path, newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["NPU Name"] != "Nan"]
    verdicts = sorted({row["Accuracy Reached or Not"] for row in rows})
    print(f"{len(rows)} legacy rows compared with the migrated run's dump: {', '.join(verdicts)}")
    sys.exit(0 if verdicts == ["Yes"] else 1)


if __name__ == "__main__":
    main()
