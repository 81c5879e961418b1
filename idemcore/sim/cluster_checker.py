"""The replicated cluster's checker (Jepsen's way): it reads only what clients saw, never a broker's files.

What clients saw: each producer's acknowledgements (the offset each acknowledged record was given), what
consumers read from whichever broker led a partition while the simulation ran (below that leader's high
watermark), and what a consumer reads of every partition at the end, once the faults are healed and the replicas
agree. The anomalies:

- ``lost_acked``: an acknowledged record that the final read does not hold;
- ``lost_reads``: a record a consumer read during the run that the final read does not hold (read below a high
  watermark, then gone: what an unclean election does);
- ``duplicates``: a record held at more than one offset in the final read;
- ``divergent_offsets``: an offset at which clients saw two different records (two reads over time, from
  different leaders, or a read and an acknowledgement);
- ``out_of_order``: a record held after a record its producer sent later, on the same partition.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: A record: (producer, number in its send order).
Record = tuple[int, int]
#: Where it was seen: (partition name "topic-p", offset).
Position = tuple[str, int]


@dataclass(frozen=True)
class ClusterCheck:
    sent: int
    acked: int
    final_records: int
    lost_acked: int
    lost_reads: int
    duplicates: int
    divergent_offsets: int
    out_of_order: int

    @property
    def anomalies(self) -> int:
        return self.lost_acked + self.lost_reads + self.duplicates + self.divergent_offsets + self.out_of_order

    @property
    def losses(self) -> int:
        """Records clients were told exist (acknowledged, or read) that are gone."""
        return self.lost_acked + self.lost_reads


def check_cluster(sent: int, acked: Mapping[Record, Position | None], reads: Iterable[tuple[Position, Record]],
                  final: Mapping[str, list[tuple[int, Record]]]) -> ClusterCheck:
    """``acked``: each acknowledged record and the position its acknowledgement named (None: an offset not told,
    as an idempotent retry answered DUPLICATE_SEQUENCE_NUMBER); ``reads``: what consumers read during the run;
    ``final``: each partition's records, in offset order, as the final read returned them."""
    seen_at: dict[Position, set[Record]] = defaultdict(set)
    final_positions: dict[Record, list[Position]] = defaultdict(list)
    out_of_order = 0
    for name, records in final.items():
        newest: dict[int, int] = {}
        for offset, record in records:
            seen_at[(name, offset)].add(record)
            final_positions[record].append((name, offset))
            producer, number = record
            if len(final_positions[record]) == 1:
                if number < newest.get(producer, -1):
                    out_of_order += 1
                newest[producer] = max(newest.get(producer, -1), number)
    read_records: set[Record] = set()
    for position, record in reads:
        seen_at[position].add(record)
        read_records.add(record)
    for record, told in acked.items():
        if told is not None and told[1] >= 0:
            seen_at[told].add(record)
    lost_acked = sum(1 for record in acked if record not in final_positions)
    lost_reads = sum(1 for record in read_records if record not in final_positions and record not in acked)
    duplicates = sum(len(positions) - 1 for positions in final_positions.values())
    divergent = sum(1 for records in seen_at.values() if len(records) > 1)
    return ClusterCheck(sent, len(acked), sum(len(r) for r in final.values()), lost_acked, lost_reads, duplicates,
                        divergent, out_of_order)


__all__ = ["ClusterCheck", "Position", "Record", "check_cluster"]
