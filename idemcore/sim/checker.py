"""The exactly-once checker: what producers sent and were told, against what the logs hold.

Each record's value names its producer and its number in that producer's
send order (``encode_value``). The checker reports acknowledged records
missing from the logs, records present more than once, records of one
producer on one partition stored out of send order, and acknowledgements
whose offset does not hold the record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from idemcore.broker import Broker


def encode_value(producer: int, number: int, padding: bytes = b"") -> bytes:
    return b"%d:%d:" % (producer, number) + padding


def decode_value(value: bytes) -> tuple[int, int]:
    producer, number, _ = value.split(b":", 2)
    return int(producer), int(number)


@dataclass(frozen=True)
class CheckReport:
    sent: int
    acked: int
    written: int
    duplicates: int  # extra copies in the logs
    lost_acked: int  # acknowledged, yet not in the logs
    out_of_order: int  # records stored after a record their producer sent later, on the same partition
    wrong_offsets: int  # acknowledged with an offset that holds another record

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.lost_acked or self.out_of_order or self.wrong_offsets)


@dataclass
class SentRecord:
    partition: str  # "topic-partition"
    offset: int | None  # acknowledged offset; None when not acknowledged


def check(sent: dict[int, list[SentRecord]], logs: Broker | Iterable) -> CheckReport:
    """``sent[producer][number]``: what each producer sent, in send order, and what it was told."""
    partition_logs = logs.logs() if isinstance(logs, Broker) else list(logs)
    seen: dict[tuple[int, int], int] = {}
    stored_at: dict[tuple[str, int], tuple[int, int]] = {}
    duplicates = out_of_order = written = 0
    for partition_log in partition_logs:
        name = f"{partition_log.topic}-{partition_log.partition}"
        newest: dict[int, int] = {}  # producer -> highest number stored so far on this partition
        for offset, _key, value, _batch in partition_log.records():
            if value is None:
                raise ValueError(f"{name} offset {offset}: a null value, which the simulation never writes")
            producer, number = decode_value(value)
            written += 1
            stored_at[(name, offset)] = (producer, number)
            if (producer, number) in seen:
                duplicates += 1
                continue
            seen[(producer, number)] = 1
            if number < newest.get(producer, -1):
                out_of_order += 1
            newest[producer] = max(newest.get(producer, -1), number)
    acked = lost = wrong = total = 0
    for producer, records in sent.items():
        total += len(records)
        for number, record in enumerate(records):
            if record.offset is None:
                continue
            acked += 1
            if (producer, number) not in seen:
                lost += 1
            elif record.offset >= 0 and stored_at.get((record.partition, record.offset)) != (producer, number):
                wrong += 1
    return CheckReport(total, acked, written, duplicates, lost, out_of_order, wrong)


__all__ = ["CheckReport", "SentRecord", "check", "decode_value", "encode_value"]
