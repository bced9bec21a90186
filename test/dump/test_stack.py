"""Stack records: the user's frames, with the line each call was made from."""

from __future__ import annotations

import json

from ptdbg_ascend.dump.stack import user_stack_json


def _innermost_line(text: str) -> int:
    name, frames = json.loads(text)
    assert name == "X_0_forward_stack_info"
    assert frames[0][0] == __file__ and frames[0][2] == "test_each_call_site_keeps_its_own_line"
    return int(frames[0][1])


def test_each_call_site_keeps_its_own_line():
    # Frames are remembered per (code, bytecode offset): calls from two lines of one function, and the
    # same line again in a loop, must each show the line they were made from.
    first = user_stack_json("X_0_forward_stack_info")
    second = user_stack_json("X_0_forward_stack_info")
    lines = []
    for _ in range(3):  # a loop, not a comprehension: that would be a frame of its own before Python 3.12
        lines.append(_innermost_line(user_stack_json("X_0_forward_stack_info")))
    assert _innermost_line(second) == _innermost_line(first) + 1
    assert lines == [_innermost_line(second) + 3] * 3  # the append line inside the loop
    code = json.loads(first)[1][0][3]
    assert code == 'first = user_stack_json("X_0_forward_stack_info")'
