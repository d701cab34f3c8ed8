"""``python -m klog`` runs the klog command line."""

from klog.cli.app import main

main()
