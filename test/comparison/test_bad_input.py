"""Every bad argument names the parameter or the path."""

from __future__ import annotations

import os

import pytest

from ptdbg_ascend.comparison.api import compare
from ptdbg_ascend.errors import CompareError, FileFormatError, ParameterError

pytestmark = pytest.mark.torchfree


@pytest.mark.parametrize("name, value", [
    ("stack_mode", "yes"), ("auto_analyze", 1), ("fuzzy_match", None), ("suffix", 3), ("suffix", "a/b")])
def test_wrong_option_types(two_dumps, output_dir, name, value):
    npu, bench = two_dumps()
    with pytest.raises(ParameterError, match=f"Invalid {name}="):
        compare(npu.param(bench), output_dir, **{name: value})


def test_input_param_not_a_dict_and_unknown_key(two_dumps, output_dir):
    npu, bench = two_dumps()
    with pytest.raises(ParameterError, match="Invalid input_param="):
        compare([npu.pkl], output_dir)
    param = dict(npu.param(bench), npu_pkl=npu.pkl)
    with pytest.raises(ParameterError, match="input_param\\['npu_pkl'\\].*unknown key"):
        compare(param, output_dir)
    with pytest.raises(ParameterError, match="is_print_compare_log"):
        compare(dict(npu.param(bench), is_print_compare_log="True"), output_dir)


def test_missing_pkl_and_data_dir(two_dumps, output_dir, tmp_path):
    npu, bench = two_dumps()
    missing = str(tmp_path / "nope.pkl")
    with pytest.raises(FileFormatError, match="nope.pkl does not exist"):
        compare(dict(npu.param(bench), npu_pkl_path=missing), output_dir)
    with pytest.raises(FileFormatError, match="bench_dump_data_dir .*nodir is not a directory"):
        compare(dict(npu.param(bench), bench_dump_data_dir=str(tmp_path / "nodir")), output_dir)
    with pytest.raises(ParameterError, match="needs bench_pkl_path"):
        compare({"npu_pkl_path": npu.pkl}, output_dir)


def test_output_path_missing_is_created_a_file_is_refused(two_dumps, tmp_path):
    """A missing output directory is created with its parents (as run-ut's -o); a file there, a path below a
    file and a symlink to nothing are refused, and a compare refused for its inputs creates nothing."""
    npu, bench = two_dumps()
    with pytest.raises(FileFormatError):
        compare(dict(npu.param(bench), npu_pkl_path=str(tmp_path / "nope.pkl")), str(tmp_path / "refused" / "out"))
    assert not os.path.exists(tmp_path / "refused")
    outcome = compare(npu.param(bench), str(tmp_path / "new" / "out"))
    assert os.path.dirname(outcome.csv_path) == str(tmp_path / "new" / "out")
    assert os.path.isfile(outcome.csv_path) and os.path.isfile(outcome.advisor_path)
    with pytest.raises(ParameterError, match="Invalid output_path=.*It is a file"):
        compare(npu.param(bench), npu.pkl)
    with pytest.raises(ParameterError, match="Invalid output_path=.*cannot be created. .*api_stack_dump.pkl is not a "
                                             "directory"):
        compare(npu.param(bench), os.path.join(npu.pkl, "out"))
    os.symlink(str(tmp_path / "gone"), str(tmp_path / "link"))
    with pytest.raises(ParameterError, match="Invalid output_path=.*It is a symlink to nothing"):
        compare(npu.param(bench), str(tmp_path / "link"))
    assert not os.path.exists(tmp_path / "gone")


def test_stack_mode_that_does_not_fit(two_dumps, output_dir):
    npu, bench = two_dumps(stack=False)
    with pytest.raises(CompareError, match="does not contain stack information, please turn off the stack_mode"):
        compare(npu.param(bench), output_dir, stack_mode=True)
    assert os.listdir(output_dir) == []
