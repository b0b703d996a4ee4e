"""What every stage shares: the names of scenarios and checks, polling, ports, processes, pipes, desensitizing, DCGM's names."""
