"""The Python worker daemon Spark starts for klog's jobs: pyspark's own, importing faster.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-*.zip`` first on a Python
worker's path. With a pip-installed pyspark (``SPARK_HOME`` is the package itself) those
zips hold the very same modules as the installed package, but Python cannot cache bytecode
for a zip: every daemon compiles pyspark from source. In a cold export (Spark 4 starts a
daemon for each planning step of a Python data source, then one for the tasks) that was
~2 s of CPU per daemon, ~10 s per run on two cores (py-spy: ``zipimport._compile_source``).

This module moves such zips to the end of ``sys.path`` -- only a zip inside the directory
of a pyspark package importable from another path entry, i.e. a copy of what is installed
-- then runs pyspark's daemon unchanged. A zip of a separate Spark installation (a cluster
whose ``SPARK_HOME`` is not the pip package) keeps its place. Used through
``spark.python.daemon.module`` (see ``klog.spark.export.session_conf``).
"""

from __future__ import annotations

import sys
from pathlib import Path


def installed_copies(path: list[str]) -> list[str]:
    """The entries of ``path`` that are zips shipped inside an importable pyspark package."""
    entries = {_resolved(e) for e in path if e}
    copies = []
    for entry in path:
        if not entry.endswith(".zip"):
            continue
        lib = Path(entry).parent  # <site>/pyspark/python/lib
        package = lib.parent.parent
        if (lib.name == "lib" and lib.parent.name == "python" and package.name == "pyspark"
                and (package / "__init__.py").is_file()
                and _resolved(str(package.parent)) in entries):
            copies.append(entry)
    return copies


def _resolved(entry: str) -> str:
    try:
        return str(Path(entry).resolve())
    except OSError:
        return entry


def reorder(path: list[str]) -> list[str]:
    """``path`` with the installed copies moved to its end (order otherwise kept)."""
    copies = installed_copies(path)
    return [e for e in path if e not in copies] + copies


if __name__ == "__main__":
    sys.path[:] = reorder(sys.path)
    from pyspark import daemon

    daemon.manager()
