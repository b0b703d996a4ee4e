"""A captured tmux pane (`tmux capture-pane -p`, text) drawn as a terminal, through shoot_page.py.

usage: python terminal_png.py PANE.txt OUT.png CHROMIUM "TITLE"
"""
import html
import re
import subprocess
import sys
from pathlib import Path

src, out, chromium = sys.argv[1], sys.argv[2], sys.argv[3]
title = sys.argv[4] if len(sys.argv) > 4 else ""
text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", Path(src).read_text(errors="replace"))
lines = text.rstrip("\n").split("\n")
page = ("<!doctype html><meta charset='utf-8'><style>body{margin:0;background:#1e1e1e}"
        ".t{font:13px/1.35 'DejaVu Sans Mono',monospace;color:#ddd;padding:10px 12px;white-space:pre}"
        ".h{font:12px sans-serif;color:#aaa;background:#333;padding:4px 12px}</style>"
        f"<div class='h'>{html.escape(title)}</div><div class='t'>{html.escape(chr(10).join(lines))}</div>")
tmp = Path(out).with_suffix(".html")
tmp.write_text(page)
subprocess.run([sys.executable, str(Path(__file__).with_name("shoot_page.py")), chromium, str(tmp), out, "1280"],
               check=True)
tmp.unlink()
