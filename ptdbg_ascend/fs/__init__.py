"""The ground floor of file access: safe writes (``writes``), one writer per directory (``locks``), confined
reads (``confined``) and sized tensor-file loading (``tensor_files``). Imports nothing above ``errors``."""
