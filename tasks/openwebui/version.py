"""The OpenWebUI DayOne runs: the version its local environment installs, and the image of that version."""

OPENWEBUI_VERSION = "0.12.4"
# Where OpenWebUI publishes its image; the same version as the local environment, so both run one client.
DEFAULT_IMAGE = f"ghcr.io/open-webui/open-webui:v{OPENWEBUI_VERSION}"
