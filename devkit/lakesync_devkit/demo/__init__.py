"""The demo database and its load generator."""
