"""The controller example (run.py, README.md). A package only so that mypy, which checks
``examples`` as a whole, names its run.py ``controller.run``, apart from
``examples/three_node_cluster/run.py``."""
