"""The flight recorder (``recorder.FlightRecorder``): the statistics of the last steps in memory, written when a
trigger fires (``triggers.py``)."""
