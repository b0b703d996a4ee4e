"""The verdict tests build runs from the plain servers of tests/independent (servers written for the tests, apart
from DayOne's simulator): their directory is importable here."""

from __future__ import annotations

import sys
from pathlib import Path

INDEPENDENT = str(Path(__file__).resolve().parents[1] / "independent")
if INDEPENDENT not in sys.path:
    sys.path.insert(0, INDEPENDENT)
