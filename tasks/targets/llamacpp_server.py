"""Run llama.cpp's HTTP server (embedded by PyPI xllamacpp) until SIGTERM.

    python -m tasks.targets.llamacpp_server --port P --alias NAME --settings-json '{...}'

The local target starts this as a detached process. llama.cpp writes its own log to stderr;
this module prints one line of its own settings and the listening address to stdout (the target
sends both to the engine's log, which the startup-findings scan reads).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
import time

from tasks.targets.llamacpp import build_params


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.targets.llamacpp_server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--alias", required=True, help="served model name, as /v1/models lists it")
    parser.add_argument("--settings-json", required=True, help="resolved launcher settings (see LlamaCppLauncher)")
    args = parser.parse_args(argv)
    if args.host != "127.0.0.1":
        parser.error("--host: only 127.0.0.1 is served by the local target")
    settings = json.loads(args.settings_json)

    import xllamacpp

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    with tempfile.TemporaryDirectory(prefix="dayone-llamacpp-slots-") as slot_dir:
        params = build_params(settings, host=args.host, port=args.port, alias=args.alias, slot_save_path=slot_dir)
        print(f"dayone llamacpp_server: xllamacpp {xllamacpp.__version__} settings {json.dumps(settings, sort_keys=True)}", flush=True)
        started = time.monotonic()
        server = xllamacpp.Server(params)  # loads the model, then serves from its own threads
        print(
            f"dayone llamacpp_server: listening on {server.listening_address} "
            f"after {time.monotonic() - started:.2f} s",
            flush=True,
        )
        while not stop.wait(0.5):
            pass
        print("dayone llamacpp_server: stopping on signal", flush=True)
        del server  # ~Server stops the HTTP loop and frees the model
    return 0


if __name__ == "__main__":
    sys.exit(main())
