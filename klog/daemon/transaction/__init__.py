"""The transaction coordinator (Kafka's kafka.coordinator.transaction): ``metadata`` (one
transactional id's state machine, no I/O), ``state_manager`` (``__transaction_state``:
partitions, loading, appends), ``markers`` (COMMIT/ABORT markers to the partitions of a
transaction), ``coordinator`` (the APIs, timeouts and expiration)."""
