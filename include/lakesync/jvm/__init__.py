"""The JVM side of lakesync: pinned jar sets (:mod:`lakesync.jvm.artifacts`) and their cache (:mod:`lakesync.jvm.fetch`)."""
