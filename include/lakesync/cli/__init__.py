"""The `lakesync` command line."""
