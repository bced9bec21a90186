"""The legacy pkl line codec: the dump's fast texts are the lines json.dumps writes, and lines read back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ptdbg_ascend.formats import pkl


@pytest.mark.torchfree
@pytest.mark.parametrize("statistics", [
    [1.5, -2.0, -0.25, 2.5],
    [None, None, None, None],
    [float("nan"), float("inf"), float("-inf"), 0.0],
    [3, 1e-300, 1e300, -0.0],
])
def test_the_dump_text_of_a_record_line_is_what_json_dumps_writes(statistics):
    for dump_step in (pkl.DUMP_STEP, pkl.OVERFLOW_DUMP_STEP):
        head = pkl.line_head(dump_step)
        fast = pkl.RECORD_LINE % ("Torch_add_0_forward_input.0", head, "torch.float32", pkl.shape_text((2, 3)),
                                  pkl.numbers_text(statistics))
        assert fast == pkl.record_line("Torch_add_0_forward_input.0", "torch.float32", [2, 3], statistics,
                                       dump_step) + "\n"
        assert pkl.record_text("Torch_add_0_forward_input.0", "torch.float32", "[2, 3]", statistics, head) == fast


@pytest.mark.torchfree
def test_a_python_scalar_record_has_the_string_shape():
    line = pkl.RECORD_LINE % ("Torch_add_0_forward_input.1", pkl.line_head(0), "<class 'float'>", pkl.SCALAR_SHAPE_TEXT,
                              pkl.numbers_text([2.0, 2.0, 2.0, 2.0]))
    assert line == '["Torch_add_0_forward_input.1", 0, [], "<class \'float\'>", "[]", [2.0, 2.0, 2.0, 2.0]]\n'
    assert json.loads(line)[4] == pkl.SCALAR_SHAPE
    assert pkl.shape_text(()) == "[]"  # a 0-d tensor's shape is the empty list


@pytest.mark.torchfree
def test_the_dump_text_of_a_stack_line_is_what_json_dumps_writes():
    frames = [["/a/train.py", "12", "step", "loss = model(x)"], ["/a/train.py", "40", "<module>", None]]
    texts = [pkl.frame_text("/a/train.py", 12, "step", "loss = model(x)"),
             pkl.frame_text("/a/train.py", 40, "<module>", None)]
    fast = pkl.STACK_LINE % ("Torch_add_0_forward_stack_info", ", ".join(texts))
    assert fast == pkl.stack_line("Torch_add_0_forward_stack_info", frames)
    assert pkl.STACK_LINE % ("X_0_forward_stack_info", "") == pkl.stack_line("X_0_forward_stack_info", [])


@pytest.mark.torchfree
def test_lines_read_back():
    record = pkl.parse_line('["Torch_add_0_forward_output", 101, [], "torch.float16", [4], [1.0, 0.0, 0.5, NaN]]')
    fields = pkl.record_fields(record)
    assert fields == ("Torch_add_0_forward_output", 101, "torch.float16", [4], fields.statistics)
    assert fields.statistics[:3] == [1.0, 0.0, 0.5] and fields.statistics[3] != fields.statistics[3]
    assert pkl.is_overflow_step(fields.dump_step) and not pkl.is_overflow_step(100)
    assert not pkl.is_overflow_step("101")  # only a number marks an overflow record
    assert pkl.record_fields(["Torch_add_0_forward_output", 0, [], "torch.float16"]) is None  # 4 fields
    assert pkl.record_fields(["A_0_forward_output", 0, [], "torch.int8", [], "no numbers"]).statistics == []
    stack = pkl.parse_line('["A_0_forward_stack_info", [["f.py", "3", "g", "x = 1"], ["f.py", 4, "h"], '
                           '["short", "1"], "text", ["f.py", "5", "k", null, "extra"]]]')
    assert pkl.stack_frames(stack) == (("f.py", "3", "g", "x = 1"), ("f.py", "4", "h", None), ("f.py", "5", "k", None))
    assert pkl.stack_frames(["A_0_forward_stack_info"]) == ()
    assert pkl.stack_frames(["A_0_forward_stack_info", {"not": "frames"}]) == ()


@pytest.mark.torchfree
@pytest.mark.parametrize("text", ['["A_0_forward_output", 0, [], "torch.flo', "{}", "[]", "[1, 2]", '"name"',
                                  "[" * 100000 + "]" * 100000])
def test_a_corrupt_line_reads_as_none(text):
    assert pkl.parse_line(text) is None


def test_the_writer_writes_the_lines_of_the_codec(tmp_path):
    # The writer's hot loop spells RECORD_LINE out (for speed): its lines are the codec's, byte for byte.
    import torch

    from ptdbg_ascend.sinks.legacy.pkl_writer import LegacyPklWriter

    writer = LegacyPklWriter(str(tmp_path / "x.pkl"), dump_step=pkl.OVERFLOW_DUMP_STEP)
    writer.write_call([("Torch_add_0_forward_input.0", torch.tensor([[1.5, -2.0]])),
                       ("Torch_add_0_forward_input.1", 2), ("Torch_add_0_forward_output", torch.tensor(float("nan")))])
    writer.write_stack("Torch_add_0_forward_stack_info", [["a.py", "3", "f", None]])
    writer.close()
    assert (tmp_path / "x.pkl").read_text(encoding="utf-8") == "".join(line + "\n" for line in [
        pkl.record_line("Torch_add_0_forward_input.0", "torch.float32", [1, 2], [1.5, -2.0, -0.25, 2.5], 101),
        pkl.record_line("Torch_add_0_forward_input.1", "<class 'int'>", pkl.SCALAR_SHAPE, [2.0, 2.0, 2.0, 2.0], 101),
        pkl.record_line("Torch_add_0_forward_output", "torch.float32", [], [float("nan")] * 4, 101),
        pkl.stack_line("Torch_add_0_forward_stack_info", [["a.py", "3", "f", None]]),
    ])


@pytest.mark.torchfree
def test_the_codec_imports_no_torch():
    code = "import sys, ptdbg_ascend.formats.pkl; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
