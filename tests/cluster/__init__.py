"""Multi-broker tests on a real ZooKeeper (fixtures in conftest.py)."""
