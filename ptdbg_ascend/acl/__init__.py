"""ACL (operator-level) dump of a single API on an Ascend NPU, through torch_npu."""

from ptdbg_ascend.acl.config import AclDumpConfig, load_acl_config, write_acl_dump_config

__all__ = ["AclDumpConfig", "load_acl_config", "write_acl_dump_config"]
