"""The ``ptdbg`` console script. Each feature package contributes its sub-commands through an
``add_commands(subparsers)`` function, so this file only dispatches and maps every error (ours and
unexpected ones) to one readable stderr line with exit status 2 (``ptdbg --debug ...`` shows the traceback);
Ctrl-C is one line too, exit status 130."""

from __future__ import annotations

import argparse
import shlex
import sys
import traceback
from typing import List, Optional

from ptdbg_ascend.errors import PtdbgError
from ptdbg_ascend.terminal import printable
from ptdbg_ascend.version import __version__


def build_parser() -> argparse.ArgumentParser:
    # The feature packages' sub-commands, imported here so that importing this module stays light.
    from ptdbg_ascend.acl import cli as acl_cli
    from ptdbg_ascend.comparison import cli as comparison_cli
    from ptdbg_ascend.compat import cli as compat_cli
    from ptdbg_ascend.grad_probe import cli as grad_probe_cli
    from ptdbg_ascend.precheck import cli as precheck_cli

    parser = argparse.ArgumentParser(
        prog="ptdbg",
        description="ptdbg_ascend: compare two PyTorch dumps API by API, parse a dump, migrate legacy scripts.",
    )
    parser.add_argument("--version", action="version", version="ptdbg_ascend " + __version__)
    parser.add_argument("-f", "--framework", type=_framework, default="pytorch",
                        help="msprobe's framework option, accepted before the command (ptdbg -f pytorch compare "
                             "...): only pytorch (the default) is allowed")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an error (default: one line on stderr)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (comparison_cli, compat_cli, acl_cli, precheck_cli, grad_probe_cli):
        module.add_commands(subparsers)
    return parser


def _framework(value: str) -> str:
    """msprobe's ``-f/--framework``: this tool debugs PyTorch only, so ``pytorch`` is the one value."""
    if value != "pytorch":
        raise argparse.ArgumentTypeError("{!r} is not supported: ptdbg_ascend debugs PyTorch only; the one value "
                                         "allowed is 'pytorch' (msprobe's -f mindspore has no counterpart "
                                         "here)".format(value))
    return value


def _one_line(text: object) -> str:
    # Messages quote paths and names from files: whitespace runs become one space, other control
    # characters (escape sequences, backspace, bidi overrides) are shown escaped.
    return printable(" ".join(str(text).split()))


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``ptdbg``. The one place where errors become exit statuses: 0 success, 1 only for "accuracy
    not reached" (the handler says so), 2 for usage and input errors (argparse's own usage errors
    included) and for any unexpected error, each as one line on stderr; ``--debug`` adds the traceback.
    Ctrl-C: exit status 130 and one line, ``ptdbg CMD: interrupted`` (run-ut and multi-run-ut add
    ``: resume with -csv_path RESULT_CSV``, the CSV that resumes the run)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv  # known before parsing, so an error while building the parser is covered too
    command = "ptdbg"
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        debug = args.debug
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.print_help()
            return 2
        command = "ptdbg " + args.command
        return int(handler(args) or 0)
    except KeyboardInterrupt as interrupt:
        if debug:
            traceback.print_exc()
        resume = getattr(interrupt, "result_csv", None)  # errors.RunInterrupted
        print(f"{command}: interrupted{': resume with -csv_path ' + shlex.quote(resume) if resume else ''}",
              file=sys.stderr)
        return 130
    except PtdbgError as error:
        if debug:
            traceback.print_exc()
        print(f"{command}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 -- the CLI boundary: no traceback unless asked for
        if debug:
            traceback.print_exc()
            hint = ""
        else:
            hint = " (an unexpected error; rerun with --debug for the traceback)"
        print(f"{command}: error: {type(error).__name__}: {_one_line(error)}{hint}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
