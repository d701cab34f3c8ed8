"""klog's chaos harness: brokers and ZooKeeper nodes in network namespaces, Jepsen-style
nemeses, real clients, and a checker (see README "Chaos testing" and runner.py)."""
