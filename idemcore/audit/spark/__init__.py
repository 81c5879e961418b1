"""Spark validation at scale: ``validate(df)`` per batch, ``audit(source)`` findings and summaries,
``audit_log_dir_spark(path)`` for Kafka log directories; ``audit_cluster_spark(url)`` for a live cluster;
``follow_stream(spark, source, out)`` the continuous audit as a Structured Streaming query;
the building blocks for users' own plans (``validate_group``, ``validate_arrow``, ``validate_stream``) in ``udfs``.

pyspark is imported only when a function here runs (``pip install idemcore[spark]``).
"""

from idemcore.audit.spark.audit_job import audit
from idemcore.audit.spark.cluster_job import audit_cluster_spark
from idemcore.audit.spark.follow_stream import follow_stream, stream_findings_schema
from idemcore.audit.spark.frame import OUTPUT_COLUMNS, validate
from idemcore.audit.spark.logdir_job import audit_log_dir_spark
from idemcore.audit.spark.session import get_session
from idemcore.audit.spark.udfs import (
    STREAM_STATE_SCHEMA,
    clustered,
    load_state,
    order_of,
    save_state,
    validate_arrow,
    validate_group,
    validate_group_with,
    validate_stream,
    validate_stream_with,
    validated_schema,
)

__all__ = [
    "OUTPUT_COLUMNS",
    "STREAM_STATE_SCHEMA",
    "audit",
    "audit_cluster_spark",
    "audit_log_dir_spark",
    "clustered",
    "follow_stream",
    "get_session",
    "load_state",
    "order_of",
    "save_state",
    "stream_findings_schema",
    "validate",
    "validate_arrow",
    "validate_group",
    "validate_group_with",
    "validate_stream",
    "validate_stream_with",
    "validated_schema",
]
