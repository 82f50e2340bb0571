"""Kafka's metadata controller on the Raft client (docs/controller.md): the control managers
that turn requests into metadata records, and the ``QuorumController`` that appends them at its
claimed epoch and completes each write when its offset commits.
"""
