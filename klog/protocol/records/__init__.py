"""Kafka's record formats: v2 RecordBatch, v0/v1 MessageSet, codecs, control records.

``batch`` holds what the hot path needs (headers, CRCs, patching); the other modules
decode and build individual records where they must be.
"""
