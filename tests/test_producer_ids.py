"""Producer-id blocks claimed by compare-and-set, on SQLite and on a real ZooKeeper (docs/rules.md §1, §3)."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from idemcore.broker.producer_ids import (
    INT64_MAX,
    ProducerIdBlock,
    ProducerIdManager,
    ProducerIdsExhaustedError,
    SqliteBlockStore,
    ZooKeeperBlockStore,
)

from .zookeeper import ZooKeeperServer


@pytest.fixture(scope="module")
def zookeeper():
    server = ZooKeeperServer()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "zookeeper"])
def store_spec(request, tmp_path):
    """(kind, where): enough to open the same store again in another process."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "ids.sqlite")
    server = request.getfixturevalue("zookeeper")
    return "zookeeper", (server.hosts, f"/test-{request.node.name.replace('[', '-').rstrip(']')}")


def open_store(spec):
    kind, where = spec
    if kind == "sqlite":
        return SqliteBlockStore(where)
    hosts, node = where
    return ZooKeeperBlockStore(hosts, node=node)


def test_blocks_follow_each_other_from_zero(store_spec):
    store = open_store(store_spec)
    first, second = ProducerIdManager(0, store), ProducerIdManager(1, store)
    assert [first.generate_producer_id() for _ in range(3)] == [0, 1, 2]
    assert second.generate_producer_id() == 1000
    data, _ = store.read()
    assert ProducerIdBlock.decode(data) == ProducerIdBlock(1, 1000, 1999)
    ids = [first.generate_producer_id() for _ in range(1000)]
    assert ids[996] == 999 and ids[997] == 2000  # block 0..999 used up, then the next free block
    store.close()


def test_a_lost_race_rereads_and_retries(store_spec):
    store = open_store(store_spec)
    manager = ProducerIdManager(0, store)
    original = store.compare_and_set
    raced = []

    def interfering(data, version):
        if not raced:  # another broker claims a block between our read and our write
            raced.append(True)
            assert original(ProducerIdBlock(9, 0, 999).encode(), version)
        return original(data, version)

    store.compare_and_set = interfering
    assert manager.generate_producer_id() == 1000
    assert manager.cas_failures == 1
    store.close()


def _claim_ids(spec, broker_id: int, count: int, out) -> None:
    store = open_store(spec)
    manager = ProducerIdManager(broker_id, store, block_size=7)
    out.put([manager.generate_producer_id() for _ in range(count)])
    store.close()


def test_processes_sharing_a_store_never_hand_out_the_same_id(store_spec):
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    workers = [context.Process(target=_claim_ids, args=(store_spec, i, 300, out)) for i in range(4)]
    for worker in workers:
        worker.start()
    ids = [i for _ in workers for i in out.get(timeout=120)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert len(ids) == 1200 and len(set(ids)) == 1200


def test_threads_sharing_a_manager_never_hand_out_the_same_id():
    manager = ProducerIdManager(0, SqliteBlockStore(), block_size=3)
    ids: list[int] = []
    lock = threading.Lock()

    def work():
        mine = [manager.generate_producer_id() for _ in range(200)]
        with lock:
            ids.extend(mine)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ids) == list(range(800))


def test_exhausted_id_space_is_a_clear_error():
    store = SqliteBlockStore()
    assert store.compare_and_set(ProducerIdBlock(0, 0, INT64_MAX - 500).encode(), -1)
    with pytest.raises(ProducerIdsExhaustedError, match="cannot claim"):
        ProducerIdManager(1, store).generate_producer_id()


def test_corrupt_block_node_is_reported():
    store = SqliteBlockStore()
    store.compare_and_set(b"not json", -1)
    with pytest.raises(Exception, match="corrupt producer id block"):
        ProducerIdManager(0, store).generate_producer_id()


def test_brokers_of_one_cluster_claim_their_blocks_in_zookeeper(zookeeper, tmp_path):
    """Each broker of a cluster (``zookeeper.connect`` set) claims producer-id blocks in ZooKeeper, not in its own
    SQLite file: two brokers never hand out one id (two producers sharing an id would corrupt each other's
    sequences), and each still records its floor in its directory."""
    from idemcore.broker import Broker
    from idemcore.broker.config import BrokerConfig
    from idemcore.broker.controller.zk_client import ZkClient

    brokers = []
    try:
        for n in range(2):
            if n == 0:  # as Kafka's brokers leave it (ZkData's persistent paths): empty, no block claimed yet
                ZkClient(f"{zookeeper.hosts}/ids-test").close()
            settings = BrokerConfig.from_properties({"broker.id": str(n), "log.dirs": str(tmp_path / f"b{n}"),
                                                     "zookeeper.connect": f"{zookeeper.hosts}/ids-test"})
            brokers.append(Broker({}, settings=settings, **settings.broker_kwargs()))
        first, second = ([b.producer_ids.generate_producer_id() for _ in range(3)] for b in brokers)
        assert not set(first) & set(second)
        assert all(not (tmp_path / f"b{n}" / "producer_ids.sqlite").exists() for n in range(2))
    finally:
        for broker in brokers:
            broker.close()
