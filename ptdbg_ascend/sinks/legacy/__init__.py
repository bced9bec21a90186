"""The legacy format's sink: the recorder's sink (``recorder``), its pkl + npy writer (``pkl_writer``) and
the npy side of a record (``npy_files``)."""
