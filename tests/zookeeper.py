"""The throwaway ZooKeeper of the tests that need one: :class:`idemcore.zookeeper_server.ZooKeeperServer`."""

from idemcore.zookeeper_server import ZooKeeperServer, ZooKeeperUnavailable

__all__ = ["ZooKeeperServer", "ZooKeeperUnavailable"]
