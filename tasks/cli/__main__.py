"""`python -m tasks.cli`: the `dayone` command."""

from tasks.cli import main

raise SystemExit(main())
