"""klog.spark.pydaemon: which zips on a Python worker's path are copies of the installed
pyspark (moved to the end) and which are a separate Spark's (kept in place)."""

from __future__ import annotations

from pathlib import Path

from klog.spark.pydaemon import installed_copies, reorder


def _pip_pyspark(site: Path) -> tuple[str, str]:
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (site / "pyspark" / "__init__.py").write_text("")
    return str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")


def test_zips_of_the_installed_pyspark_go_last(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, py4j_zip = _pip_pyspark(site)
    path = [pyspark_zip, py4j_zip, "/opt/stdlib.zip", str(site), "/elsewhere"]
    assert installed_copies(path) == [pyspark_zip, py4j_zip]
    assert reorder(path) == ["/opt/stdlib.zip", str(site), "/elsewhere", pyspark_zip, py4j_zip]


def test_zips_of_another_spark_keep_their_place(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pyspark_zip, _ = _pip_pyspark(site)
    cluster = str(tmp_path / "spark-4.0" / "python" / "lib" / "pyspark.zip")
    # A separate installation's zip, and the pip one while its site dir is not on the path.
    for path in ([cluster, str(site)], [pyspark_zip, "/elsewhere"]):
        assert installed_copies(path) == []
        assert reorder(path) == path
