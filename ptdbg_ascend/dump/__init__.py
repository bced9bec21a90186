"""The dump engine: interception, selection, statistics, backward capture and the dump session."""
