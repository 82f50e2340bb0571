"""The bottom of kraft: small shared vocabulary every other package may use.

Nothing here imports another ``kraft`` package, so ``record``, ``protocol``, ``snapshot`` and
``log`` can all stand on it without importing each other (tests/test_layering.py checks the
direction).
"""
