"""``python -m ptdbg_ascend COMMAND ...``: the ``ptdbg`` console script (``ptdbg_ascend.cli``), e.g. under
``torchrun ... -m ptdbg_ascend compare-distributed NPU BENCH OUT``, where no console script is on the path."""

import sys

from ptdbg_ascend.cli import main

if __name__ == "__main__":
    sys.exit(main())
