"""Kafka's cluster metadata: the records of ``__cluster_metadata`` (``ApiMessageAndVersion``
framing, Kafka's flexible-version encoding), timeline collections that can be read as of an
offset and reverted, and the immutable ``MetadataImage`` built from ``MetadataDelta``s
(docs/controller.md). Sans-IO, like the Raft core below it.
"""
