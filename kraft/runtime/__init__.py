"""The I/O shell around the sans-IO core (DESIGN §4): the driver thread, the thread-safe
message queue, the trio TCP transport and ``RaftNode``, the embeddable node."""
