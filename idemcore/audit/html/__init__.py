"""The audit as a page to look at and share: :func:`write_html` writes one self-contained HTML file.

The findings table with links to each finding's batches, per-partition charts of findings over time, each
busy partition's batches and findings over time (from the replay's timeline), the distribution of completed
transactions' durations (from the replay's histogram) and of how long open ones have been open, the last stable
offset lag per partition, the open transactions
on a time line with their verdict, the gaps with their missing ranges, and the command and dataset that produced
it. Charts are matplotlib figures inlined as SVG; the page has no script and fetches nothing. Its size is bounded
on big audits (:class:`Limits`): tables keep their first rows and say how many were left out, charts aggregate.
"""

from idemcore.audit.html.data import Limits
from idemcore.audit.html.page import is_html_report, render_html, write_html

__all__ = ["Limits", "is_html_report", "render_html", "write_html"]
