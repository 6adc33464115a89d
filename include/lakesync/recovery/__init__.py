"""Recovery by position: Kafka lost records the stream needs, and the binlog still has them (docs/operations.md)."""
