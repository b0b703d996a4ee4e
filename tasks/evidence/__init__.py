"""Evidence beyond a 200: long-context needles, the boundary re-test, prefix-cache verdicts,
metrics scraping and TTFT reliability (PROTOCOL.md sections 4 and 5)."""
