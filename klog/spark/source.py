"""The PySpark data source "klog": Spark's Kafka source, batch reads, offline or live.

    from klog.spark import register
    register(spark)
    df = (spark.read.format("klog")
          .option("path", "/var/lib/kafka/data")      # or kafka.bootstrap.servers
          .option("subscribe", "orders")
          .option("includeHeaders", "true")
          .load())

This module is only the glue to ``pyspark.sql.datasource``: options are ``options``',
planning is ``plan``'s and rows come from ``offline`` / ``live`` as Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from klog.spark.arrow import spark_ddl
from klog.spark.options import parse_options
from klog.spark.plan import ReadTask, plan_tasks, read_task


class KlogInputPartition(InputPartition):
    """One ReadTask, as Spark ships it to an executor."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task.index)
        self.task = task


class KlogDataSource(DataSource):
    """Format "klog": Kafka topic data with Spark's Kafka-source schema."""

    @classmethod
    def name(cls) -> str:
        return "klog"

    def schema(self) -> str:
        return spark_ddl(parse_options(self.options).include_headers)

    def reader(self, schema: Any) -> DataSourceReader:
        return KlogReader(dict(self.options))


class KlogReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = parse_options(options)

    def partitions(self) -> Sequence[InputPartition]:
        return [KlogInputPartition(task) for task in plan_tasks(self.options)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, KlogInputPartition):
            return  # nothing to read: Spark's stand-in for an empty partition list
        yield from read_task(partition.task)


def register(spark: Any) -> None:
    """Make ``spark.read.format("klog")`` available in this session."""
    spark.dataSource.register(KlogDataSource)
