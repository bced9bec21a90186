"""The migration shim, installed as ``ptdbg_ascend.compat``: legacy calls -> msprobe 1.0.4 config.

* :func:`export_config` writes the msprobe 1.0.4 ``config.json`` equivalent to the legacy calls this
  process made (``ptdbg export-config`` does it for a whole script run);
* :func:`map_calls` is the pure mapping behind it (``compat.mapping``);
* ``ptdbg convert`` (``compat.convert``) turns a legacy pkl+npy dump into dump.json+.pt and back;
* ``ptdbg migrate`` (``compat.migrate``) rewrites a legacy script into the PrecisionDebugger form.

The legacy call log that ``export_config`` reads lives in the core (``ptdbg_ascend/call_log.py``),
so the core never imports this package. This package loads its modules only when a name is first used
(PEP 562) and never imports torch.
"""

__all__ = ["export_config", "map_calls", "Caveat", "MappingResult"]


def __getattr__(name):
    if name == "export_config":
        from ptdbg_ascend.compat.export import export_config

        return export_config
    if name in ("map_calls", "Caveat", "MappingResult"):
        from ptdbg_ascend.compat import mapping

        return getattr(mapping, name)
    raise AttributeError(f"module 'ptdbg_ascend.compat' has no attribute {name!r}")
