"""Spark validation at scale: ``validate(df)`` per batch, ``audit(source)`` findings and summaries.

pyspark is imported only when a function here runs (``pip install idemcore[spark]``).
"""

from .audit_job import audit
from .frame import OUTPUT_COLUMNS, validate
from .session import get_session

__all__ = ["OUTPUT_COLUMNS", "audit", "get_session", "validate"]
