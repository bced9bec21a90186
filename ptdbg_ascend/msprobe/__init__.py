"""The msprobe 1.0.4-format recorder behind :class:`~ptdbg_ascend.debugger.PrecisionDebugger`:
``selection`` (scope/list/data_mode), ``recording`` (the API observer, L1: selection + sink, and the sink's
options), ``modules`` (module hooks, L0/mix), ``level_l2`` (ACL dump through the ACL feature). The sink is
``ptdbg_ascend.sinks.msprobe.sink``, its file writer ``ptdbg_ascend.sinks.msprobe.json_writer``, its leaf codec
(values -> dump.json leaves) ``ptdbg_ascend.sinks.msprobe.leaves``."""
