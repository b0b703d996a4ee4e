"""Screenshots of a report's sections in headless Chromium (Playwright), for docs/screenshots/.

usage: python shoot_report.py CHROMIUM REPORT.html OUT_DIR PREFIX
Each shot runs from a section's heading to the next heading of the page's own level (h2) that is not
part of it, resized to 1000 px wide and reduced to 256 colours to stay small.
"""
import sys
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

# name -> (first section id, ids that belong to the shot after it)
SHOTS = {
    "top": ("", ()),  # the page's top down to the engine-vs-engine table
    "throughput": ("throughput", ()),
    "ttft": ("ttft", ()),
    "answers": ("quality", ("parity",)),
}
JS = """([first, also]) => {
  const all = [...document.querySelectorAll('h2')];
  let start = first ? document.getElementById(first) : document.body;
  if (!start) return null;
  const top = first ? start.getBoundingClientRect().top + window.scrollY : 0;
  let end = null;
  for (const h of all) {
    const y = h.getBoundingClientRect().top + window.scrollY;
    if (y <= top + 1) continue;
    if (also.includes(h.id)) continue;
    if (!first && !['engines', 'comparison'].includes(h.id)) continue;
    end = y; break;
  }
  if (end === null) end = document.body.scrollHeight;
  return [top, end];
}"""

chromium, report, out_dir, prefix = sys.argv[1:5]
out = Path(out_dir)
out.mkdir(parents=True, exist_ok=True)
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.goto(Path(report).resolve().as_uri())
    for name, (first, also) in SHOTS.items():
        box = page.evaluate(JS, [first, list(also)])
        if box is None:
            print(f"{name}: no #{first} on this page")
            continue
        top, end = box
        height = min(end - top + 10, 2600)
        raw = out / f"{prefix}-{name}.raw.png"
        page.screenshot(path=str(raw), full_page=True, clip={"x": 0, "y": max(top - 10, 0), "width": 1300,
                                                             "height": height})
        img = Image.open(raw).convert("RGB")
        img = img.resize((1000, round(img.height * 1000 / img.width)), Image.LANCZOS)
        final = out / f"{prefix}-{name}.png"
        img.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(final, optimize=True)
        raw.unlink()
        print(f"{final}: {img.size[0]}x{img.size[1]}, {final.stat().st_size // 1024} KB")
    browser.close()
