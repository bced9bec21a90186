"""The legacy format's sink: the recorder's sink and the recorder of a dump window (``sink``), its pkl + npy
writer (``pkl_writer``) and the npy side of a record (``npy_files``)."""
