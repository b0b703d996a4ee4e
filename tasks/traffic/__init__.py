"""Traffic like the user's: request traces read, turned into prompts and replayed on their schedule."""
