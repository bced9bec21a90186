"""The msprobe 1.0.4 format's sink: dump.json, stack.json and construct.json plus ``.pt`` tensors
(``sink``: the recorder's sink; ``json_writer``: its file writer)."""
