"""``python -m klog`` runs the klog command line."""

from klog.cli.entry import main

main()
