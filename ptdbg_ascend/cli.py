"""The ``ptdbg`` console script. Each feature package contributes its sub-commands through an
``add_commands(subparsers)`` function, so this file only dispatches and maps our errors to one
readable stderr line with exit status 2."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional

from ptdbg_ascend.errors import PtdbgError
from ptdbg_ascend.version import __version__

# Modules that define sub-commands; a module that does not exist yet is skipped.
COMMAND_MODULES = ("ptdbg_ascend.comparison.cli", "ptdbg_ascend.compat.cli", "ptdbg_ascend.acl.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ptdbg",
        description="ptdbg_ascend: compare two PyTorch dumps API by API, parse a dump, migrate legacy scripts.",
    )
    parser.add_argument("--version", action="version", version="ptdbg_ascend " + __version__)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            continue
        module.add_commands(subparsers)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        result = handler(args)
    except PtdbgError as error:
        print("ptdbg {}: error: {}".format(args.command, error), file=sys.stderr)
        return 2
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
