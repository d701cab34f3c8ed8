"""Build of klog's one C extension (everything else is in pyproject.toml).

klog.storage._fastread is the sequential reader's read path in C. It is optional: where no
C compiler is found the build goes on without it and klog takes the Python path, which does
the same thing more slowly (scripts/setup-system.sh installs gcc and the Python headers, so
`make setup` builds it).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "klog.storage._fastread",
            ["klog/storage/_fastread.c"],
            optional=True,
            extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
