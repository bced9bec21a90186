"""free_benchmark (msprobe 1.0.4's no-bench check): each selected API call run again on perturbed inputs and its
output held to the dtype's standard, with no bench run at all (``PrecisionDebugger`` with ``"task":
"free_benchmark"``; doc/free_benchmark_guide.md). ``observer.py`` runs it, ``perturb.py`` makes the inputs,
``judge.py`` measures, ``report.py`` writes ``free_benchmark.csv``, ``backward_run.py`` and ``preheat.py`` the
backward stage and the preheating."""
