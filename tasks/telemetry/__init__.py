"""What an engine and its machine report while they run: metrics scrapes, counter windows, GPU telemetry, hardware."""
