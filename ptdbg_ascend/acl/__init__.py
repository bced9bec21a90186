"""ACL (operator-level) dump of a single API on an Ascend NPU, through torch_npu."""
