"""The ``klog`` command line: a typer app, one module per command group."""
