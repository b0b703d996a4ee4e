"""How long the UI tests wait for `make ui`'s stack, which runs below the test workers' CPU priority."""

STACK_READY_TIMEOUT_S = 300  # migrating the DB, then parsing a DayOne DAG on a busy machine
# One API answer: on a loaded machine the stack's API server has been seen to answer after 30 s (a browser's
# polls queue ahead of a test's request).
API_TIMEOUT_S = 90
# A page's wait for what it shows: its API calls, each up to API_TIMEOUT_S (CI saw a run's page not open
# within 60 s of the trigger while the API server answered the open DAG page's polls in 5-7 s each).
UI_TIMEOUT_MS = 2 * API_TIMEOUT_S * 1000
