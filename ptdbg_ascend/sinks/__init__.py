"""Where records go: the legacy pkl + npy sink (``legacy``), the msprobe dump.json + .pt sink (``msprobe``)
and the background writer they share (``background``). The legacy overflow check's Overflow_info_* files are
written by its observer (``overflow/observer.py``) through the legacy pkl writer."""
