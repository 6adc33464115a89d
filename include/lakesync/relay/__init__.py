"""The relay: binlog -> Kafka with durable, positioned progress (see :mod:`lakesync.relay.worker`)."""

from lakesync.relay.offsets import RelayProgress, covered_range
from lakesync.relay.worker import Lag, Relay, RelayStats

__all__ = ["Lag", "Relay", "RelayProgress", "RelayStats", "covered_range"]
