"""The embedded development stack behind `lakesync dev` and the test fixtures."""
