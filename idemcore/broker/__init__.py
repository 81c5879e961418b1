"""The broker, shaped like Kafka's: ``Broker`` (the front: one ``handle`` for every request, the lifecycle),
``ReplicaManager`` and ``Partition`` (the partitions and the one append path), ``LogManager`` (the log directory),
``Topics`` (the catalog), ``log/`` (a partition's log as Kafka's files), ``recovery`` (producer state at start),
``coordinator/`` (transactions), ``group/`` (consumer groups), ``server`` (Kafka's wire protocol over TCP, only
a transport), producer-id blocks and the broker's settings (``config``)."""

from idemcore.broker.broker import Broker
from idemcore.broker.config import BrokerConfig
from idemcore.broker.log import LogCorruptionError, PartitionLog
from idemcore.broker.topics import TopicExistsError

__all__ = ["Broker", "BrokerConfig", "LogCorruptionError", "PartitionLog", "TopicExistsError"]
