"""The Spark engine of ``kraft sim sweep``: runs as Spark tasks, events straight to Parquet.

Above :mod:`kraft.analysis` (it writes the analysis's event schema) and :mod:`kraft.simulation`
(it runs the simulator in the executors); pyspark and pyarrow, the ``spark`` extra, are
imported inside functions, so that ``kraft sim`` works without them.
"""

from kraft.spark_sweep.engine import SUMMARY_PARQUET, build_zip, spark_sweep
from kraft.spark_sweep.tasks import EVENTS_DIR

__all__ = ["EVENTS_DIR", "SUMMARY_PARQUET", "build_zip", "spark_sweep"]
