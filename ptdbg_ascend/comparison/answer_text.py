"""The advisor's report: :class:`Advice` (its text, in the log's legacy order and answer first for the file)
and :func:`write_advice`, which writes the prose file and, beside it, the finding file
(``formats/finding.py``) that a later run reads."""

from __future__ import annotations

import os
from typing import List, NamedTuple, Optional, Tuple

from ptdbg_ascend.comparison.reports import open_new
from ptdbg_ascend.formats import finding as finding_file
from ptdbg_ascend.formats.finding import Finding
from ptdbg_ascend.formats.layout import ADVISOR_STEM
from ptdbg_ascend.log import logger

# The body lines that answer "which call, where, how wrong" (and, at levels L0/mix, which module), and what was
# not compared: the advisor file opens with them.
ANSWER_LINES = ("Suspect API: ", "Re-run: ", "Code: ", "First failure: ", "Diverging module: ", "Incomplete: ",
                "Too little could be compared: ", "Nothing could be compared: ")

class Advice(NamedTuple):
    """``line`` is the CSV line (header = line 1), "NA" when no row failed. ``body`` holds the lines
    after the three legacy ones (Line / Suspect Nodes / Expert Advice). ``finding``: the same answer as
    data (None, the default: no row failed), written beside the prose by :func:`write_advice`."""

    line: str
    suspect: str
    advice: str
    body: Tuple[str, ...] = ()
    finding: Optional[Finding] = None

    def text(self) -> str:
        """The legacy order, as the log prints it: Line / Suspect Nodes / Expert Advice, then the body."""
        return self._legacy_head() + "".join(line + "\n" for line in self.body)

    def file_text(self) -> str:
        """The advisor file, answer first: the ``Suspect API``, ``Code`` and ``First failure`` lines of the
        body (the latter naming the failing tensor and its CSV line), then ``Next step:`` (the advice); without
        a failing row the advice itself opens it. The rest
        of the body follows, then the legacy Line / Suspect Nodes / Expert Advice lines (scripts read them)."""
        opening, rest = self.sections()
        return "".join(line + "\n" for line in opening + rest) + self._legacy_head()

    def sections(self) -> Tuple[List[str], List[str]]:
        """``(opening, rest)``: the lines the advisor file opens with (the answer lines of the body, then
        ``Next step:``; or the advice alone) and the rest of the body, as :meth:`file_text` writes them."""
        answer = [self._named_failure(line) for line in self.body if line.startswith(ANSWER_LINES)]
        rest = [line for line in self.body if not line.startswith(ANSWER_LINES)]
        return (answer + ["Next step: " + self.advice] if answer else [self.advice]), rest

    def _named_failure(self, line: str) -> str:
        """``First failure:`` with the failing tensor and its CSV line, which the log gives in Suspect Nodes."""
        head = "First failure: "
        if not line.startswith(head) or self.line == "NA":
            return line
        return f"{head}{self.suspect} (CSV line {self.line}): {line[len(head):]}"

    def _legacy_head(self) -> str:
        return f"Line: {self.line}\nSuspect Nodes: {self.suspect}\nExpert Advice: {self.advice}\n"


def write_advice(advice: Advice, output_path: str, stem: str) -> str:
    """Log the advice (legacy order, :meth:`Advice.text`) and write it to ``{output_path}/{stem}.txt`` (0640,
    answer first, :meth:`Advice.file_text`); returns the path. ``stem`` is ``advisor_{tail}``: the finding, when a
    row failed (or, as a warning, a call computes below its dtype's precision), goes to
    ``compare_finding_{tail}.json`` beside it
    (0640); without a finding a same-named JSON left there is removed (it would name a stale suspect)."""
    logger.info("The summary of the expert advice is as follows: ")
    for line in advice.text().splitlines():
        logger.info(line)
    path = os.path.join(output_path, stem + ".txt")
    with open_new(path) as handle:
        handle.write(advice.file_text())
    tail = stem[len(ADVISOR_STEM):] if stem.startswith(ADVISOR_STEM) else stem
    finding_path = os.path.join(output_path, finding_file.file_name(tail))
    if advice.finding is not None:
        with open_new(finding_path) as handle:
            handle.write(finding_file.encode(advice.finding))
    elif os.path.lexists(finding_path):
        os.remove(finding_path)
    logger.info(f"The advisor summary is saved in: {path}")
    return path
