"""`airflow standalone` as `make ui` runs it: on loopback only, with no log server.

Standalone's scheduler and triggerer each start a log server that binds every interface (the host is
fixed in airflow.utils.serve_logs) while the rest of `make ui` stays on 127.0.0.1. On one machine the
API server reads task logs from their files, so both run with `--skip-serve-logs` and nothing listens
beyond loopback.
"""

from __future__ import annotations

import sys

from airflow.cli.commands import standalone_command

WITHOUT_LOG_SERVER = ("scheduler", "triggerer")


class _LoopbackSubCommand(standalone_command.SubCommand):
    def __init__(self, parent, name: str, command: list[str], env: dict[str, str]):
        if command[:1] and command[0] in WITHOUT_LOG_SERVER:
            command = [*command, "--skip-serve-logs"]
        super().__init__(parent, name, command, env)


def main() -> int:
    # What `airflow`'s own entry point does first: write airflow.cfg with its secrets (jwt_secret among them)
    # before any component starts; otherwise each component draws its own JWT secret and every task's
    # token is refused ("Invalid auth token").
    from airflow.configuration import write_default_airflow_configuration_if_needed

    write_default_airflow_configuration_if_needed()
    standalone_command.SubCommand = _LoopbackSubCommand
    standalone_command.StandaloneCommand().run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
