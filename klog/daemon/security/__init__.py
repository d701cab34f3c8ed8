"""Security: who a connection is (principal.py); authentication and authorization build on it."""
