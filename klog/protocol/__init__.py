"""Sans-I/O Kafka protocol: bytes in, values out.

Nothing in this package opens a socket or a file, starts a thread or touches asyncio.
It imports nothing else from klog.
"""
