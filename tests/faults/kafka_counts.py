"""How many times each change is in Kafka, counted by source position under read_committed.

Delta alone can't show a change published twice (the sink's position rule hides it), so the fault tests
count the records per (topic, position, key): exactly once is one each. Independent of lakesync's reader.
"""

from __future__ import annotations

from collections import Counter

from tests.kafkakit import read_records


def position_counts(bootstrap: str, topics: list[str], *, isolation: str = "read_committed"
                    ) -> Counter[tuple[str, str, bytes]]:
    counts: Counter[tuple[str, str, bytes]] = Counter()
    for topic in topics:
        for record in read_records(bootstrap, topic, isolation=isolation):
            headers = dict(record.headers() or [])
            counts[(topic, headers["lakesync.pos"].decode(), record.key() or b"")] += 1
    return counts


def assert_each_change_once(bootstrap: str, topics: list[str]) -> int:
    """Every change under read_committed exactly once; returns how many changes there are."""
    counts = position_counts(bootstrap, topics)
    doubled = {what: n for what, n in counts.items() if n > 1}
    assert not doubled, f"{len(doubled)} changes published more than once, e.g. {list(doubled.items())[:3]}"
    return len(counts)
