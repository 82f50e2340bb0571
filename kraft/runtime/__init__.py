"""The I/O shell around the sans-IO core (Kafka's ``KafkaRaftClientDriver`` and
``KafkaNetworkChannel``): the driver thread, the thread-safe message queue, the trio TCP
transport and ``RaftNode``, the embeddable node (docs/operations.md, docs/transport.md)."""
