"""klog's PySpark integration: the "klog" data source and the export job.

``register(spark)`` makes ``spark.read.format("klog")`` available; ``klog.spark.export``
runs ``klog spark-export``. Needs the ``spark`` extra (pyspark, pyarrow); importing this
package does not import pyspark.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the "klog" data source with a SparkSession."""
    from klog.spark.source import register as _register

    _register(spark)


__all__ = ["register"]
