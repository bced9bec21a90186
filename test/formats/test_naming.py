"""The record-name grammar (formats/naming.py), pinned with hand-written names: legacy and dotted, strict
(known prefixes) and tolerant (any prefix), and the run_ut API names the pre-check derives from rows."""

from __future__ import annotations

import pytest

from ptdbg_ascend.formats.naming import (CallName, DottedCall, RecordName, api_of, call_name, is_api_name,
                                         leading_call_name, parse_call_name, parse_dotted_call_name,
                                         parse_record_name, parse_ut_row_name, split_call_name, split_record_name,
                                         to_dotted, to_dotted_without_direction, to_legacy, ut_api_of_call,
                                         ut_api_of_record, ut_api_of_row)

pytestmark = pytest.mark.torchfree


# --- legacy, strict ----------------------------------------------------------------------------------------

def test_call_names_parse_from_the_right():
    assert parse_call_name("Functional_max_pool2d_0_forward") == ("Functional", "max_pool2d", 0, "forward")
    assert parse_call_name("Tensor___add___0_forward") == ("Tensor", "__add__", 0, "forward")
    assert parse_call_name("NPU_npu_fusion_attention_12_backward") == ("NPU", "npu_fusion_attention", 12, "backward")
    assert parse_call_name("Torch_add_1_2_forward") == ("Torch", "add_1", 2, "forward")
    assert parse_call_name("Aten_add.Tensor_0_forward") == ("Aten", "add.Tensor", 0, "forward")
    assert call_name("Tensor", "__add__", 0, "forward") == "Tensor___add___0_forward"


@pytest.mark.parametrize("name", [
    "Module_Conv2d_0_forward",            # not a torch API prefix
    "NPU_npu_fusion_attention",           # an API name: no counter, no direction
    "Torch_add_0",                        # no direction
    "Torch_add_forward",                  # no counter
    "Distributed.all_reduce.0.forward",   # dotted
    "Torch_add_0_forward_input.0",        # a record, not a call
    "torch_add_0_forward",                # prefixes are case-sensitive
])
def test_names_that_are_no_strict_call(name):
    assert parse_call_name(name) is None


def test_record_names():
    assert parse_record_name("Tensor___add___0_forward_input.0") == RecordName(
        "Tensor___add___0_forward", "Tensor", "__add__", 0, "forward", "input", (0,))
    assert parse_record_name("Functional_relu_3_forward_output") == RecordName(
        "Functional_relu_3_forward", "Functional", "relu", 3, "forward", "output", ())
    assert parse_record_name("Torch_split_1_backward_output.2.1").path == (2, 1)
    assert parse_record_name("Functional_conv2d_0_forward_stack_info") == RecordName(
        "Functional_conv2d_0_forward", "Functional", "conv2d", 0, "forward", "stack", ())
    # kwargs tensors continue the positional numbering: a kwargs record is an input record like any other
    assert parse_record_name("Torch_add_0_forward_input.2").path == (2,)
    assert parse_record_name("Torch_add_0_forward_input").path == ()  # the grammar allows a bare side for both
    for name in ("Torch_add_0_forward_input.alpha", "Torch_add_0_forward_kwargs.0",
                 "Module_Conv2d_0_forward_input.0", "Torch_add_0_forward", "_stack_info"):
        assert parse_record_name(name) is None, name


def test_call_without_direction_becomes_a_dotted_run_ut_name():
    assert to_dotted_without_direction("Tensor_permute_1") == "Tensor.permute.1"
    assert to_dotted_without_direction("Functional_max_pool2d_01") == "Functional.max_pool2d.01"  # counter as written
    assert to_dotted_without_direction("Tensor_permute_1_forward") is None
    assert to_dotted_without_direction("Module_Conv2d_0") is None


# --- legacy, tolerant --------------------------------------------------------------------------------------

def test_split_call_name_takes_any_prefix():
    assert split_call_name("Functional_linear_3_forward") == CallName("Functional_linear", 3, "forward")
    assert split_call_name("Module_Conv2d_0_backward") == CallName("Module_Conv2d", 0, "backward")
    assert split_call_name("Tensor___add___10_forward") == CallName("Tensor___add__", 10, "forward")
    assert split_call_name("Torch_add_1_2_forward") == CallName("Torch_add_1", 2, "forward")
    # outside the grammar: its own API, index -1, "forward"
    assert split_call_name("NPU_npu_fusion_attention") == CallName("NPU_npu_fusion_attention", -1, "forward")
    assert split_call_name("Distributed.all_reduce.0.forward") == CallName(
        "Distributed.all_reduce.0.forward", -1, "forward")


def test_api_of_drops_prefix_counter_and_direction():
    assert api_of("Functional_max_pool2d_0_forward") == "max_pool2d"
    assert api_of("Tensor___add___0_forward") == "__add__"
    assert api_of("Module_Conv2d_0_forward") == "Conv2d"
    assert api_of("NPU_npu_fusion_attention") == "npu_fusion_attention"
    assert api_of("weird") == "weird"


def test_split_record_name_takes_any_prefix():
    assert split_record_name("Module_Conv2d_0_forward_input.0") == ("Module_Conv2d_0_forward", "input")
    assert split_record_name("Tensor___add___0_forward_output") == ("Tensor___add___0_forward", "output")
    assert split_record_name("Torch_split_1_backward_output.2.1") == ("Torch_split_1_backward", "output")
    assert split_record_name("Functional_conv2d_0_forward_stack_info") == ("Functional_conv2d_0_forward", "stack")
    # greedy: the last "_{n}_{direction}" before the side ends the call
    assert split_record_name("Torch_a_1_forward_b_2_forward_input.0") == ("Torch_a_1_forward_b_2_forward", "input")
    for name in ("Torch_add_0_forward", "Torch_add_0_forward_input.x", "_stack_info", "Torch.add.0.forward.input.0",
                 "NPU_npu_fusion_attention_output"):
        assert split_record_name(name) is None, name


def test_leading_call_name_of_a_name_cut_short():
    assert leading_call_name("Torch_add_0_forward_inp") == "Torch_add_0_forward"
    assert leading_call_name("Torch_add_0_forward") == "Torch_add_0_forward"
    assert leading_call_name("Module_Conv2d_3_backward_output.0") == "Module_Conv2d_3_backward"
    # the shortest such prefix
    assert leading_call_name("Torch_a_1_forward_b_2_forward_input.0") == "Torch_a_1_forward"
    assert leading_call_name("Torch_add_0_forw") is None
    assert leading_call_name("") is None


def test_api_names_of_an_api_mapping():
    for name in ("Functional_rms_norm", "rms_norm", "NPU_npu_fusion_attention", "Torch_linalg.inv", "Module_Conv2d",
                 "Tensor___add__"):
        assert is_api_name(name), name
    for name in ("Functional_rms_norm_0_forward", "Tensor___add___1_backward", "relu", "_stack_info",
                 "Functional.rms_norm", "1x_y", "Functional_", "Functional_rms norm"):
        assert not is_api_name(name), name


# --- msprobe (dotted) --------------------------------------------------------------------------------------

def test_dotted_call_names():
    assert parse_dotted_call_name("Distributed.all_reduce.0.forward") == DottedCall(
        "Distributed", "all_reduce", "0", "forward")
    assert parse_dotted_call_name("Aten.add.Tensor.0.forward") == ("Aten", "add.Tensor", "0", "forward")
    assert parse_dotted_call_name("Torch.linalg.inv.07.backward") == ("Torch", "linalg.inv", "07", "backward")
    for name in ("Functional.linear.0.forward.input.0", "Module.block.Block.forward.0", "Functional.linear.0",
                 "Functional_linear_0_forward", "Functional.linear.forward"):
        assert parse_dotted_call_name(name) is None, name


def test_legacy_to_dotted_and_back():
    assert to_dotted("Tensor___add___0_forward_input.0") == "Tensor.__add__.0.forward.input.0"
    assert to_dotted("Functional_relu_0_forward_output") == "Functional.relu.0.forward.output.0"  # `_output` alone
    assert to_dotted("Functional_relu_0_forward_output.1") == "Functional.relu.0.forward.output.1"
    assert to_dotted("Distributed_all_reduce_2_backward") == "Distributed.all_reduce.2.backward"
    assert to_dotted("Functional_relu_0_forward_stack_info") is None
    assert to_dotted("Module_Conv2d_0_forward") is None
    assert to_legacy("Tensor.__add__.0.forward.input.0") == "Tensor___add___0_forward_input.0"
    assert to_legacy("Functional.relu.0.forward.output.0") == "Functional_relu_0_forward_output.0"
    assert to_legacy("Functional.relu.0.forward.output.0", single_output=True) == "Functional_relu_0_forward_output"
    assert to_legacy("Functional.relu.0.forward.output.1", single_output=True) == "Functional_relu_0_forward_output.1"
    assert to_legacy("Distributed.all_reduce.0.forward") == "Distributed_all_reduce_0_forward"
    assert to_legacy("Torch.add.0.forward.kwargs.alpha") is None  # kwargs file names have no legacy form
    assert to_legacy("Module.block.Block.forward.0") is None


# --- run_ut API names of rows ------------------------------------------------------------------------------

def test_row_names_of_both_formats():
    assert ut_api_of_record("Functional_gelu_0_forward_output") == ("Functional.gelu.0", "forward", "output")
    assert ut_api_of_record("Tensor___add___1_backward_input.0") == ("Tensor.__add__.1", "backward", "input")
    assert ut_api_of_record("Tensor_add__3_forward_output") == ("Tensor.add_.3", "forward", "output")
    assert ut_api_of_record("Functional.gelu.0.forward.output.0") == ("Functional.gelu.0", "forward", "output")
    assert ut_api_of_record("Tensor.__add__.1.forward.kwargs.alpha") == ("Tensor.__add__.1", "forward", "input")
    assert ut_api_of_record("Functional_gelu_0_forward_stack_info") is None
    assert ut_api_of_record("Module.block.Block.forward.0.output.0") is None


def test_run_ut_names_of_calls_and_rows():
    assert ut_api_of_call("Functional_gelu_0_forward") == ("Functional.gelu.0", "forward")
    assert ut_api_of_call("Tensor.__add__.1.backward") == ("Tensor.__add__.1", "backward")
    assert ut_api_of_call("Functional_gelu_0_forward_output") is None
    assert ut_api_of_call("Module_Conv2d_0_forward") is None
    assert ut_api_of_row("Functional.linear.0.forward.output.1") == "Functional.linear.0"
    assert ut_api_of_row("Torch.linalg.inv.3.backward.output.0") == "Torch.linalg.inv.3"
    assert ut_api_of_row("Functional.linear.0.forward.input.0") == "Functional.linear.0.forward.input.0"
    assert ut_api_of_row("weird") == "weird"


def test_run_ut_row_names():
    assert parse_ut_row_name("Functional.linear.0.forward.output.0") == ("linear", "Functional.linear.0", "forward")
    assert parse_ut_row_name("Torch.linalg.inv.3.backward.output.1") == (
        "linalg.inv", "Torch.linalg.inv.3", "backward")
    assert parse_ut_row_name("linear.0") is None
    assert parse_ut_row_name("Aten.add.Tensor.extra.0.forward.output.0") is None  # 8 parts: msprobe takes 6 or 7



def test_a_counter_or_index_of_more_than_18_digits_is_outside_the_grammar():
    # int() of 5000 digits raises ValueError (Python's 4300-digit limit); no run makes 10**18 calls.
    from ptdbg_ascend.formats.naming import (long_number, number_problem, parse_call_name, parse_dotted_call_name,
                                             parse_record_name, split_call_name, split_record_name, to_legacy)

    eighteen, nineteen, huge = "9" * 18, "9" * 19, "1" * 5000
    assert parse_record_name(f"Torch_relu_{eighteen}_forward_output").index == 10 ** 18 - 1
    assert parse_record_name(f"Torch_relu_0_forward_input.{eighteen}").path == (10 ** 18 - 1,)
    for counter in (nineteen, huge):
        assert parse_record_name(f"Torch_relu_{counter}_forward_output") is None
        assert parse_call_name(f"Torch_relu_{counter}_forward") is None
        assert split_record_name(f"Module_Conv2d_{counter}_forward_output") is None
        assert split_call_name(f"Torch_relu_{counter}_forward") == (f"Torch_relu_{counter}_forward",
                                                                           -1, "forward")
        assert to_legacy(f"Torch.relu.{counter}.forward") is None
        assert parse_dotted_call_name(f"Torch.relu.{counter}.forward") is None
    assert parse_record_name(f"Torch_relu_0_forward_input.0.{nineteen}") is None
    assert split_record_name(f"Torch_relu_0_forward_input.{huge}") is None
    assert to_legacy(f"Torch.relu.0.forward.input.{nineteen}") is None
    assert long_number(f"Torch_relu_{huge}_forward") == 5000
    assert long_number(f"Torch_relu_{eighteen}_forward") is None
    assert number_problem(f"Torch_relu_{nineteen}_forward") == (
        ": it holds a number of 19 digits (a call counter or index has at most 18)")
    assert number_problem("garbage") == "" and number_problem(5) == ""
