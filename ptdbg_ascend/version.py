"""The package version. It is part of every dump directory name (``{dump_tag}_v{__version__}``)."""

__version__ = "1.0"
