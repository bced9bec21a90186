"""The API pre-check (msprobe 1.0.4 ``run_ut`` / ``multi_run_ut`` / ``api_precision_compare``).

Re-runs every API of a dump on the CPU in float64 (the benchmark) and in the dumped dtype, and judges
the device result against the benchmark with the seed's "new precision standard":

- ``standards``: the facts (which API uses which comparison algorithm, the thresholds per dtype), as
  msprobe 1.0.4 ships them in ``api_precision_standard.yaml`` / ``api_precision_threshold.yaml``.
- ``judge``: the metrics and the verdict of one output (``judge_output``), the detail/result columns.
- ``device_compare``: ``api_precision_compare``: NPU details against GPU details, three-way verdicts.
- ``plan`` (options, dump, calls to run), ``api_inputs``, ``execution``, ``call_check`` (one call: run,
  judge, its rows), ``results`` (rows committed to the CSVs and counted in memory), ``run_ut`` /
  ``multi_run_ut``, ``cli``: rebuilding the calls, running them, the CSVs and the summary.
- ``compare_link``: each failing API linked to the compare of the same run (its finding file).

Importing this package imports nothing heavy: torch is imported by the modules that need it.
"""
