"""``ptdbg acl-config``: write a correct ACL ``dump.json``, or check an existing one."""

from __future__ import annotations

import argparse


def _acl_config(args: argparse.Namespace) -> int:
    from ptdbg_ascend.acl.config import load_acl_config, write_acl_dump_config

    if args.check:
        from ptdbg_ascend.terminal import printable

        config = load_acl_config(args.config_path)
        print(printable("{} is a valid ACL dump config: dump_path={}, dump_mode={}, dump_op_switch={}.".format(
            config.config_path, config.dump_path, config.dump_mode, config.dump_op_switch)))  # values from the file
        return 0
    if args.dump_path is None:
        from ptdbg_ascend.errors import ParameterError

        raise ParameterError("--dump-path", None, "is required to write a dump.json (or give --check)")
    config = write_acl_dump_config(args.config_path, args.dump_path, dump_mode=args.dump_mode,
                                   dump_op_switch=args.dump_op_switch)
    print("Wrote {} (dump_path={}, dump_mode={}, dump_op_switch={}).".format(
        config.config_path, config.dump_path, config.dump_mode, config.dump_op_switch))
    return 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "acl-config", help="write (or --check) the dump.json of an ACL dump",
        description="Write a correct ACL dump.json for register_hook(..., dump_mode='acl', dump_config=...), "
                    "or check an existing one with --check.")
    parser.add_argument("config_path", help="the .json file")
    parser.add_argument("--dump-path", dest="dump_path", default=None,
                        help="where the NPU writes the operator files (required unless --check)")
    parser.add_argument("--dump-mode", dest="dump_mode", default="all", choices=["output", "input", "all"],
                        help="default: all")
    parser.add_argument("--dump-op-switch", dest="dump_op_switch", default="on", choices=["on", "off"],
                        help="default: on (needed for single-API dumps)")
    parser.add_argument("--check", action="store_true", help="only validate an existing file")
    parser.set_defaults(handler=_acl_config)
