"""klog's asyncio Kafka client: network (connections, ApiVersions, metadata), producer,
consumer and admin. A library users can import; the CLI and broker-to-broker traffic use it.
"""
