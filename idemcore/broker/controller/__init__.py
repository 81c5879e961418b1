"""Kafka's ZooKeeper-era controller: registrations and partition state in ZooKeeper (:mod:`.zk_client`), leader
elections (:mod:`.election`), replica placement (:mod:`.assignment`) and the controller itself
(:mod:`.controller`), which tells brokers what they lead and follow."""
