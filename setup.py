"""Build of klog's C extensions (everything else is in pyproject.toml).

klog.storage._fastread is the sequential reader's read path in C; klog.protocol._produce
decodes Produce requests and encodes their answers; klog.spark._columns decodes v2 records
into Arrow buffers for spark-export; klog.protocol.records._records checks the records of a
produced v2 batch (the C twin of klog/protocol/records/validate.py); klog.storage._cleaner
is the log cleaner's offset map and record filter (the C twin of
klog/storage/cleaner_py.py). The first two share klog/_slots.h (reading and writing
__slots__ from C), the last three klog/_v2records.h (the v2 record grammar). All are
optional: where no C compiler is found the build goes on without them and klog takes the
Python paths, which do the same thing more slowly (scripts/setup-system.sh installs gcc
and the Python headers, so `make setup` builds them).
"""

from setuptools import Extension, setup


def _extension(name: str, source: str, *depends: str) -> Extension:
    """An optional extension built with warnings on; ``depends``: the headers it includes."""
    return Extension(
        name,
        [source],
        include_dirs=["klog"],
        depends=list(depends),
        optional=True,
        extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    )


setup(
    ext_modules=[
        _extension("klog.storage._fastread", "klog/storage/_fastread.c", "klog/_slots.h"),
        _extension("klog.protocol._produce", "klog/protocol/_produce.c", "klog/_slots.h"),
        _extension("klog.spark._columns", "klog/spark/_columns.c", "klog/_v2records.h"),
        _extension(
            "klog.protocol.records._records", "klog/protocol/records/_records.c",
            "klog/_v2records.h",
        ),
        _extension("klog.storage._cleaner", "klog/storage/_cleaner.c", "klog/_v2records.h"),
    ]
)
