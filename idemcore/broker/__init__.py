"""The broker: one ``Broker.handle`` for every request, partition logs, producer-id blocks.

Room for what comes next: ``coordinator/`` (transactions, group offsets) and
``server`` (Kafka's wire protocol over TCP) call the same ``Broker.handle``.
"""

from idemcore.broker.broker import Broker, TopicExistsError
from idemcore.broker.config import BrokerConfig
from idemcore.broker.log import LogCorruptionError, PartitionLog

__all__ = ["Broker", "BrokerConfig", "LogCorruptionError", "PartitionLog", "TopicExistsError"]
