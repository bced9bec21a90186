"""grad_probe (msprobe 1.0.4's gradient state monitor): ``monitor.py`` summarises each parameter's gradient before
every optimizer step, ``comparator.py`` compares the directions of two runs step by step."""
