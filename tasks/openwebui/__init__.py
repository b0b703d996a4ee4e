"""OpenWebUI, the Day-1 report's real client, in front of each engine: started from its own virtual
environment (server.py), used as a person would (session.py over socketio.py), judged (checks.py)."""
