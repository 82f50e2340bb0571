"""The bottom of kraft: small shared vocabulary every other package may use.

- :mod:`kraft.common.clock`: the ``Clock`` protocol and ``ManualClock``;
- :mod:`kraft.common.uuids`: Kafka's reserved Uuids and their text form;
- :mod:`kraft.common.limits`: the int32 / int64 ranges of the wire and file formats;
- :mod:`kraft.common.fsutil`: fsync of a directory, crash-safe replacement of a file.

Nothing here imports another ``kraft`` package, so ``record``, ``protocol``, ``snapshot`` and
``log`` can all stand on it without importing each other (tests/test_layering.py checks the
direction), and nothing here does I/O of its own but file I/O (tests/test_sans_io.py).
"""
