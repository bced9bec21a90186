"""The msprobe 1.0.4 format's sink: dump.json, stack.json and construct.json plus ``.pt`` tensors
(``sink``: the recorder's sink, told what to write by ``options``; ``json_writer``: its file writer;
``autocast``: the autocast state an entry records)."""
