"""How far an engine's support of the model is along: release, preview, nightly or dev.

The Day-1 report picked its production engine on this: one engine's support was a preview image whose
upstream change was not merged yet, however good its numbers. An engine's maturity is declared in the
config (`engines[].maturity`) or read where the image says it: its tag's words (`preview`, `nightly`,
`dev`, `rc`, ...) and its OCI label `org.opencontainers.image.version`, which pinning reads. A declared
value wins; a disagreement between any two of them is said beside it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

Maturity = Literal["release", "preview", "nightly", "dev"]
MATURITIES: tuple[str, ...] = Maturity.__args__  # type: ignore[attr-defined]
VERSION_LABEL = "org.opencontainers.image.version"

# A word of a tag or version and the maturity it says (a release candidate is not a release yet).
WORDS: dict[str, str] = {"preview": "preview", "rc": "preview", "alpha": "preview", "beta": "preview",
                         "pre": "preview", "nightly": "nightly", "snapshot": "nightly", "dev": "dev"}
_PLAIN_VERSION = re.compile(r"^v?\d+(\.\d+)+")  # v0.5.0, 0.11.0-cu128: a release unless a word says otherwise


def read_version(text: str | None) -> tuple[str, str] | None:
    """(maturity, the word or version that says it) from a tag or version string; None when it says nothing
    (`latest`, `main`, a build number)."""
    if not text:
        return None
    lowered = text.lower()
    for word in re.findall(r"[a-z]+", lowered):  # v0.11.0rc1 -> v, rc; nightly-20260101 -> nightly
        if word in WORDS:
            return WORDS[word], word
    if _PLAIN_VERSION.match(lowered):
        return "release", text
    return None


def engine_maturity(declared: str | None, tag: str | None, version_label: str | None) -> dict[str, Any]:
    """The engine's maturity with where it comes from: `maturity` (None: nothing says), `source`, `declared`,
    `image` (what the image says: of its tag and label, the less mature) and `disagreement` (a sentence naming
    the sources that disagree, or None)."""
    said = {f"its image tag `{tag}`": read_version(tag),
            f"its image label {VERSION_LABEL}=`{version_label}`": read_version(version_label)}
    said = {where: found for where, found in said.items() if found}
    # tag and label disagreeing: the less mature (a preview tag on a release's version label is a preview)
    image = max(said.items(), key=lambda item: MATURITIES.index(item[1][0]), default=None)
    sources = ({"the config": declared} if declared else {}) | {where: found[0] for where, found in said.items()}
    disagreement = None
    if len(set(sources.values())) > 1:
        disagreement = "the sources disagree: " + "; ".join(f"{where} says {m}" for where, m in sources.items()) + (
            " (the declared value wins)" if declared else " (the less mature is taken)")
    if declared:
        maturity, source = declared, "declared in the config"
    elif image:
        maturity, source = image[1][0], f"read from {image[0]}"
    else:
        maturity, source = None, None
    return {"maturity": maturity, "source": source, "declared": declared,
            "image": image[1][0] if image else None, "disagreement": disagreement}


def ranks_below_release(maturity: str | None) -> bool:
    """A preview, nightly or dev engine: for production it ranks below a release that passes the same checks."""
    return maturity in ("preview", "nightly", "dev")


def image_tag(image: str | None) -> str | None:
    """The tag of an image reference (`REGISTRY/NAME:TAG@DIGEST`); None without one."""
    if not image:
        return None
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[1] if ":" in name else None


def spec_maturity(spec: Any, pinned: dict[str, Any] | None) -> dict[str, Any]:
    """`engine_maturity` of an engine of the config (its declared maturity and image tag) and its pin (the
    image's version label, where pinning read one), with its upstream reference."""
    pinned = pinned or {}
    found = engine_maturity(spec.maturity, pinned.get("tag") or image_tag(spec.image), pinned.get("version_label"))
    return {**found, "upstream": spec.upstream}
