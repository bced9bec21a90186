"""The one service that computes a tensor's statistics: now, in a device batch, or on the writer thread.

* ``rules``: the two formats' rules as objects (``LEGACY``: ``eager.py``; ``MSPROBE``: ``msprobe_rules.py``);
* ``pending``: the one value of statistics computed later (``PendingStatistics``: ``done()``, ``result()``);
* ``planner``: chooses eager / device batch / writer thread for each tensor of a writer;
* ``device_batch``: the reductions launched on a device and read back in batches (the one place that runs
  statistics kernels on an accelerator);
* ``fused_batch``: the references a device batch keeps instead, read by one fused pass (``fused_plan``: the chunk
  plan and its numpy emulator; ``fused_triton``: the Triton kernels) at a launch, before any write to them;
* ``eager``: the reductions run now (torch, and numpy for small CPU tensors and the writer's copies);
* ``cache``: the statistics of the tensors of the last call or two, so a tensor recorded twice is reduced once;
* ``flags``: the reductions of the overflow check.

Nothing is imported here: ``import ptdbg_ascend.statistics`` costs nothing (torch is imported by the modules).
"""
