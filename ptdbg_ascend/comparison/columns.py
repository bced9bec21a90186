"""The compare CSV's column names, under the name comparison's modules import them by. They live in
``formats/compare_columns.py`` (a file format's names, on the ground floor): the pre-check reads the compare CSV
by them, and comparison imports the pre-check (the advisor's re-run, ``rerun.py``), so neither may import the
other for them."""

from ptdbg_ascend.formats.compare_columns import *  # noqa: F401,F403  (re-exported: every name of its __all__)
