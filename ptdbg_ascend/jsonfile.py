"""Reading the JSON files users hand us (config.json, the ACL dump.json, msprobe dump/stack files), with
one set of messages: each names the file, says whether it is missing, unreadable or not JSON, and never
surfaces a bare ``json.JSONDecodeError``."""

from __future__ import annotations

import json
import os
from typing import Any

from ptdbg_ascend.errors import FileFormatError, ParameterError


def load_json(path: str, what: str, not_json_hint: str = "") -> Any:
    """The JSON value stored in ``path``.

    Args:
        path: the file.
        what: how messages name the file, e.g. ``"config file"``, ``"ACL dump config"``.
        not_json_hint: appended to the not-JSON message, e.g. ``" (incomplete after a crash?)"``.
            Default "".

    Raises:
        ParameterError: ``path`` is not a path (an int would be taken for a file descriptor).
        FileFormatError: the file does not exist, cannot be read, or does not hold JSON.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise ParameterError(what, path, "must be the path of a JSON file")
    if not os.path.isfile(path):
        raise FileFormatError("The {} {} does not exist (or is not a file).".format(what, path))
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, UnicodeDecodeError) as error:
        raise FileFormatError("Cannot read the {} {}: {}".format(what, path, error)) from None
    except ValueError as error:
        raise FileFormatError("The {} {} is not valid JSON{}: {}".format(what, path, not_json_hint, error)) from None
    except RecursionError:
        raise FileFormatError("The {} {} is not valid JSON: it is nested too deeply.".format(what, path)) from None
