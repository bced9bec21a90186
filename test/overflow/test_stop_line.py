"""The overflow stop ends a training script exactly as the user guide writes it: the last line of an uncaught
stop is ``ValueError: [overflow N times]: dump file is saved in '....pkl'.`` (legacy ``register_hook``) and a
``ValueError:`` line for ``PrecisionDebugger(task="overflow_check")``; both still caught as OverflowLimitReached."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

from ptdbg_ascend.errors import OverflowLimitReached, PtdbgError

# The guide's quick start (doc/overflow_guide.md) around a small model whose input blows up from step 2 on.
GUIDE_SNIPPET = textwrap.dedent('''
    import sys, torch
    from ptdbg_ascend import *

    class ExpHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.exp(self.fc(x)).mean()

    seed_all()
    model = ExpHead()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    set_dump_path(sys.argv[1] + "/npu_dump.pkl")
    register_hook(model, overflow_check, overflow_nums=3)
    for step in range(6):
        loss = model(torch.randn(4, 8) * (1000.0 if step >= 2 else 1.0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
''')

DEBUGGER_SNIPPET = textwrap.dedent('''
    import sys, torch
    from ptdbg_ascend import PrecisionDebugger

    debugger = PrecisionDebugger(task="overflow_check", dump_path=sys.argv[1])
    model = torch.nn.Linear(8, 8)
    debugger.start()
    for step in range(3):
        torch.exp(model(torch.randn(4, 8) * (1000.0 if step == 1 else 1.0))).mean().backward()
    debugger.stop()
''')


def _run(tmp_path, source):
    script = tmp_path / "train.py"
    script.write_text(source)
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("ASCEND_WORK_PATH", None)
    done = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    return out, done.stderr.rstrip("\n").splitlines()


def test_legacy_overflow_stop_ends_with_the_guides_value_error_line(tmp_path):
    out, stderr = _run(tmp_path, GUIDE_SNIPPET)
    rank_dir = out / "ptdbg_dump_v1.0" / "rank0"
    third = [name for name in os.listdir(str(rank_dir)) if name.endswith("_3.pkl")]
    assert len(third) == 1, sorted(os.listdir(str(rank_dir)))
    assert stderr[-1] == "ValueError: [overflow 3 times]: dump file is saved in '{}'.".format(
        os.path.abspath(str(rank_dir / third[0])))


def test_precision_debugger_overflow_stop_ends_with_a_value_error_line(tmp_path):
    out, stderr = _run(tmp_path, DEBUGGER_SNIPPET)
    directory = os.path.abspath(str(out / "step0" / "rank"))
    assert stderr[-1] == ("ValueError: Overflow check stops training at overflow 1 (overflow_nums=1); the overflowing "
                          "calls are in {}.".format(directory))


def test_the_stop_is_still_its_own_class_and_survives_pickling():
    error = OverflowLimitReached("[overflow 1 times]: dump file is saved in 'x.pkl'.")
    assert type(error) is not ValueError and isinstance(error, (ValueError, RuntimeError, PtdbgError))
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is OverflowLimitReached and copy.args == error.args
