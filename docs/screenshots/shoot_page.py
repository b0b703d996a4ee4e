"""A whole page in headless Chromium (Playwright), resized to 1000 px wide at most and reduced to 256 colours.

usage: python shoot_page.py CHROMIUM PAGE.html OUT.png VIEWPORT_WIDTH
"""
import sys
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

chromium, page_path, out, width = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
raw = out + ".raw.png"
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page(viewport={"width": width, "height": 100})  # the page's own height, full_page
    page.goto(Path(page_path).resolve().as_uri())
    page.screenshot(path=raw, full_page=True)
    browser.close()
img = Image.open(raw).convert("RGB")
if img.width > 1000:
    img = img.resize((1000, round(img.height * 1000 / img.width)), Image.LANCZOS)
img.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
Path(raw).unlink()
print(out, img.size, Path(out).stat().st_size // 1024, "KB")
