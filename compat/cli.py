"""``ptdbg export-config``, ``ptdbg convert`` and ``ptdbg migrate``.

Exit status: 0 done; 1 done but something needs the user's attention (the script failed, a migration
could not be done); 2 bad arguments or unreadable input (one ``ptdbg CMD: error: ...`` line).
"""

from __future__ import annotations

import argparse
import json
import sys

from ptdbg_ascend.terminal import printable, printable_text


def _print_caveats(caveats, stream=None) -> None:
    stream = stream or sys.stdout
    if caveats:
        print(f"Not mapped exactly ({len(caveats)}):", file=stream)
        for caveat in caveats:
            print(f"  - {printable(caveat)}", file=stream)  # values from the script: one line each


def _export_config(args: argparse.Namespace) -> int:
    from ptdbg_ascend.compat.export import run_and_export

    script_args = list(args.script_args)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]
    run = run_and_export(args.script, script_args, args.output)
    print(f"Wrote {printable(args.output)}.")
    _print_caveats(run.caveats)
    if run.error is not None:
        print("The script failed ({}: {}); the config holds the legacy calls made before that.".format(
            type(run.error).__name__, printable(run.error)), file=sys.stderr)
        return 1
    return 0


def _convert(args: argparse.Namespace) -> int:
    from ptdbg_ascend.compat.convert import convert

    from ptdbg_ascend.terminal import printable

    result = convert(args.source, args.target, name=args.name)
    for metadata in result.written:
        print(f"Wrote {printable(metadata)}.")
    print(f"{result.tensor_files} tensor file(s) in all.")
    for what, count in sorted(result.dropped.items()):
        # a kind is a dump.json "type" from the file: its escape sequences must not reach the terminal
        print(f"  not representable in the target format: {count} value(s) of type {printable(what)}")
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from ptdbg_ascend.compat.migrate import migrate_file

    migration = migrate_file(args.script, config_path=args.config, output=args.output, write=args.write)
    # the script's text (its code in the issues, its lines in the diff) is shown escaped, never obeyed: an
    # escape sequence or bidi override in a comment must not act on the terminal. The file written is exact.
    if not migration.ok:
        for issue in migration.issues:
            print(f"{printable(issue)} (cannot rewrite)", file=sys.stderr)
        print("Nothing was written: fix or rewrite these lines by hand, then run ptdbg migrate again.", file=sys.stderr)
        return 1
    diff = migration.diff()
    if not diff:
        print(f"{printable(args.script)}: no legacy dump call found; nothing to migrate.")
        return 0
    sys.stdout.write(printable_text(diff))
    if not migration.writes_config:
        print("\nA msprobe 1.0.4 script: only its imports change; its config.json runs as it is (every task).")
        print(f"{'Wrote' if args.write else 'Dry run: nothing written (add --write). Would write'} "
              f"{printable(args.output or args.script)}.")
        return 0
    config_name = printable(args.config) if args.config else "config.json (beside the script)"
    print(f"\n{'Wrote' if args.write else 'Would write'} {config_name}:")
    print(json.dumps(migration.mapping.config, indent=4))  # ensure_ascii: every control is a \\u escape
    _print_caveats(migration.mapping.caveats)
    if args.write:
        print(f"Wrote {printable(args.output or args.script)}.")
    else:
        print("Dry run: nothing written (add --write).")
    return 0


def add_commands(subparsers) -> None:
    """Register the migration sub-commands on the ``ptdbg`` parser."""
    export = subparsers.add_parser(
        "export-config", help="run a legacy script and write the equivalent msprobe 1.0.4 config.json",
        description="Runs SCRIPT (as `python SCRIPT ARGS...`) and writes the msprobe 1.0.4 config.json equivalent "
                    "to the legacy calls it made, even when the script fails; lists what cannot be mapped exactly.")
    export.add_argument("-o", "--output", default="config.json", help="config file to write (default config.json)")
    export.add_argument("script", help="the legacy training script")
    export.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")
    export.set_defaults(handler=_export_config)

    convert = subparsers.add_parser(
        "convert", help="legacy pkl+npy dump <-> msprobe dump.json+stack.json+dump_tensor_data/*.pt",
        description="Converts one rank's dump into the other format, losslessly for what both hold. SOURCE is a "
                    ".pkl, a dump.json or a rank directory with one of them; TARGET a new directory.")
    convert.add_argument("source", help="a .pkl (npy dir beside it), a dump.json, a rank directory, or a directory "
                                        "of rank* directories (legacy tag dir / msprobe step dir)")
    convert.add_argument("target", help="a new (or empty) directory for the converted dump")
    convert.add_argument("--name", default="dump", help="msprobe -> legacy: the pkl stem (default dump)")
    convert.set_defaults(handler=_convert)

    migrate = subparsers.add_parser(
        "migrate", help="rewrite a legacy script into the PrecisionDebugger form plus a config.json",
        description="Rewrites seed_all/set_dump_path/register_hook/set_dump_switch/set_overflow_check_switch/"
                    "set_backward_input into PrecisionDebugger(config_path=...), start() and stop(), keeping the rest "
                    "of the file byte for byte. Prints a unified diff; writes only with --write.")
    migrate.add_argument("script", help="the legacy training script")
    migrate.add_argument("--write", action="store_true", help="write the script and the config (default: dry run)")
    migrate.add_argument("--config", default=None,
                         help="config file to write and reference (default: config.json beside the script, referenced "
                              "as ./config.json)")
    migrate.add_argument("-o", "--output", default=None, help="write the migrated script here instead of over SCRIPT")
    migrate.set_defaults(handler=_migrate)
