"""Compare two dumps: readers -> matching -> metrics -> verdicts -> reports -> advisor.

Named ``comparison`` (not ``compare``) because a subpackage called ``compare`` would replace the
``ptdbg_ascend.compare`` function with the module on first import. Imports neither torch nor pandas
at module level.
"""
