"""Kubernetes objects for engines (manifests.py), the `dayone render` command (cli.py) and the
API calls that deploy, watch and remove them (api.py)."""
