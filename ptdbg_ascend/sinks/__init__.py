"""Where records go: the legacy pkl + npy sink (``legacy``), the msprobe dump.json + .pt sink (``msprobe``),
and the background writer they share (``background``)."""
