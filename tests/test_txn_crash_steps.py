"""A broker SIGKILLed at every write of a commit (or abort): the PrepareCommit record, each marker, the
CompleteCommit record. After the restart the transaction is never torn: before its Prepare* record is durable
it is still open (and the timeout aborts it everywhere); after, the restart finishes it on every partition with
the same outcome."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from idemcore.broker import Broker
from idemcore.protocol.codes import ControlType

PARTITIONS = 3
#: PrepareX, a marker per partition, CompleteX.
WRITES = 1 + PARTITIONS + 1

CHILD = textwrap.dedent("""
    import os, signal, sys
    from idemcore.broker import Broker
    from idemcore.broker.log import PartitionLog
    from idemcore.net.messages import ProduceRequest
    from idemcore.record.batch import RecordBatch

    data_dir, kill_at, committed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "commit"
    broker = Broker({"t": PARTITIONS}, data_dir=data_dir, transaction_state_partitions=3, clock=lambda: 1_000)
    coordinator = broker.txn_coordinator
    init = coordinator.init_producer_id("tx", 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    coordinator.add_partitions_to_txn("tx", pid, epoch, [("t", p) for p in range(PARTITIONS)])
    for p in range(PARTITIONS):
        answer = broker.handle(ProduceRequest((RecordBatch("t", p, (b"v%d" % p,), None, pid, epoch, 0, 1_000,
                                                           True),)))
        assert answer.responses[0].error_code == 0, answer
    real_add = PartitionLog._add
    writes = [0]
    def add(self, *args, **kwargs):
        writes[0] += 1
        if writes[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_add(self, *args, **kwargs)
    PartitionLog._add = add
    print("end_txn", coordinator.end_txn("tx", pid, epoch, committed), writes[0], flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no clean close, even when every write happened
""").replace("PARTITIONS", str(PARTITIONS))


def markers(broker: Broker, partition: int) -> list[int]:
    return [stored.control[0] for stored in broker.log("t", partition).batches if stored.control is not None]


@pytest.mark.parametrize("outcome", ["commit", "abort"])
@pytest.mark.parametrize("kill_at", range(1, WRITES + 2))  # the last: killed after every write
def test_a_kill_at_any_write_of_the_outcome_never_tears_the_transaction(tmp_path, kill_at, outcome):
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(kill_at), outcome],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -9, child.stderr
    if kill_at > WRITES:
        assert child.stdout == f"end_txn 0 {WRITES}\n", child.stdout  # every write happened, then died
    wanted = ControlType.COMMIT if outcome == "commit" else ControlType.ABORT
    now = [1_000]
    with Broker({"t": PARTITIONS}, data_dir=tmp_path, transaction_state_partitions=3, clock=lambda: now[0]) as broker:
        (described,) = broker.txn_coordinator.describe_transactions(["tx"])
        if kill_at == 1:  # the Prepare* record never written: the transaction is still open
            assert described.state == "Ongoing"
            assert all(markers(broker, p) == [] for p in range(PARTITIONS))
            assert all(broker.log("t", p).last_stable_offset == 0 for p in range(PARTITIONS))
            now[0] += 60_001  # its timeout passes: the coordinator aborts it everywhere
            broker.run_housekeeping()
            wanted = ControlType.ABORT
            (described,) = broker.txn_coordinator.describe_transactions(["tx"])
        assert described.state == ("CompleteCommit" if wanted == ControlType.COMMIT else "CompleteAbort")
        for p in range(PARTITIONS):
            # A partition whose marker went out before the kill gets a second one from the restart (Kafka re-sends
            # every marker of a Prepare* it loads; the one without an open transaction ends nothing).
            assert set(markers(broker, p)) == {wanted}, (p, markers(broker, p))
            assert len(markers(broker, p)) == (2 if 2 <= p + 2 < kill_at <= WRITES else 1)
            assert broker.log("t", p).last_stable_offset == broker.log("t", p).log_end_offset
