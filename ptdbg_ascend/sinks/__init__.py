"""Where records go: the legacy pkl + npy sink (``legacy``), the msprobe dump.json + .pt sink (``msprobe``),
the legacy overflow check's Overflow_info_* pkl + npy sink (``overflow``) and the background writer they
share (``background``)."""
