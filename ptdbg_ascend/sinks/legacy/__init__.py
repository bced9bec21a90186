"""The legacy format's sink: the recorder's sink (``recorder``) and its pkl + npy writer (``pkl_writer``)."""
