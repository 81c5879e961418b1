"""Spark validation at scale: ``validate(df)`` per batch, ``audit(source)`` findings and summaries,
``audit_log_dir_spark(path)`` for Kafka log directories.

pyspark is imported only when a function here runs (``pip install idemcore[spark]``).
"""

from idemcore.audit.spark.audit_job import audit
from idemcore.audit.spark.frame import OUTPUT_COLUMNS, validate
from idemcore.audit.spark.logdir_job import audit_log_dir_spark
from idemcore.audit.spark.session import get_session

__all__ = ["OUTPUT_COLUMNS", "audit", "audit_log_dir_spark", "get_session", "validate"]
