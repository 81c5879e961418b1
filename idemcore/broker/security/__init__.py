"""Security as Kafka's brokers do it: who a connection is (:mod:`.session`: a principal from TLS or SASL, the
client's host, the listener), how it proves it (SASL PLAIN and SCRAM, KIP-152; mutual TLS), and what it may do
(:mod:`.acls`: Kafka's ACL model, checked on every request as ``KafkaApis`` checks it)."""
