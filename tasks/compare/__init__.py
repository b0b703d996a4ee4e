"""The nightly comparison with the last good run: its baselines, the two sides, the traffic inputs."""
