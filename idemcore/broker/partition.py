"""One partition this broker leads (Kafka's ``Partition``): its log and its high watermark, under the broker-wide
number its producers have in the state table. On one broker the high watermark is the log end; the leader and
follower state of replication (ISR, leader epoch, followers' ends) will live here."""

from __future__ import annotations

from dataclasses import dataclass

from idemcore.broker.log import PartitionLog


@dataclass(eq=False)
class Partition:
    topic: str
    partition: int
    #: The partition's number in the producer-state table (rows of the kernel's ``partition`` column).
    number: int
    log: PartitionLog

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def high_watermark(self) -> int:
        """The offset up to which every replica in sync holds the log: with no followers, the log end."""
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the earliest open transaction, capped by the high watermark."""
        return min(self.log.last_stable_offset, self.high_watermark)
