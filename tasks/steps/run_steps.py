"""The run-level steps' bodies: pinning (now, or from the digest catalog for a dated run), the cleanup
of killed runs' engines, the nightly's comparison, the tables' validation, the archive and the report."""

from __future__ import annotations

from typing import Any

from tasks.config import ConfigError, RunConfig
from tasks.run import RunContext
from tasks.run_documents import MANIFEST, PINNED, manifest


def pin_now(ctx: RunContext) -> dict[str, str]:
    """Resolve each engine's identity (image digests, or local command line and version) now."""
    cfg = ctx.config
    found = {e.name: ctx.target.pin(cfg, e) for e in cfg.engines}
    _same_image_across_variants(cfg, found)
    ctx.run_dir.write_json(PINNED, found)
    doc = manifest(ctx.run_dir) or {}
    doc["pinned"] = found
    if cfg.scenarios.openwebui.enabled and cfg.target == "kubernetes":  # OpenWebUI's image, pinned like theirs
        from tasks.openwebui.cluster import pin_openwebui

        doc["openwebui_pinned"] = pin_openwebui(ctx)
    ctx.run_dir.write_json(MANIFEST, doc)
    return {name: p["image_digest"] for name, p in found.items()}


def _same_image_across_variants(cfg: RunConfig, found: dict[str, dict[str, Any]]) -> None:
    """An experiment's variants run one image unless the image is a factor: a tag that moved between
    two resolutions would make the effect of a factor the effect of two images. (A local engine's
    digest is of its whole launch identity, settings included: it differs by design.)"""
    exp = cfg.experiment
    if exp is None or cfg.target != "kubernetes" or any(s in ("image", "digest") for s in (*(f.setting for f in exp.factors), *exp.allow_differences)):
        return
    base = found[exp.base].get("image_digest")
    for name, pin in found.items():
        if pin.get("image_digest") != base:
            raise ConfigError([(f"engines[{[e.name for e in cfg.engines].index(name)}].image",
                                f"{name} pinned {pin.get('image_digest')} but the base {exp.base} pinned {base}; "
                                "the image is not a factor of the experiment",
                                "pin both to one digest (engines[].digest), or declare image as a factor")])


def pin(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """Pin now; a dated run (nightly, backfill) pins from the digest catalog's entry for its date."""
    if ctx.logical_date is None:
        return {"source": "pinned now", "digests": pin_now(ctx)}
    from tasks.catalog import pin_for_date

    return pin_for_date(ctx, pin_now)


def compare(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """The nightly's regression check against the last good run and the reference (tasks/compare.py)."""
    ctx.planned()
    from tasks.compare import compare_run

    return compare_run(ctx.run_dir, ctx.config, ctx.s3(), ctx.accepted_run_ids)


def validate(ctx: RunContext, _: None = None) -> dict[str, Any]:
    ctx.planned()
    from tasks.validate import validate_run

    return validate_run(ctx.run_dir)


def archive(ctx: RunContext, _: None = None) -> dict[str, Any]:
    ctx.planned()
    from tasks.archive import archive_run

    ctx.read_api_keys()  # each is then scrubbed from every archived byte, whatever its shape
    return archive_run(ctx.run_dir, ctx.config, ctx.s3())


def report(ctx: RunContext, _: None = None) -> dict[str, Any]:
    ctx.planned()
    from tasks.report import publish_report

    ctx.read_api_keys()
    return publish_report(ctx.run_dir, ctx.config, ctx.s3())


def cleanup(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """Delete DayOne's cluster objects older than kubernetes.cleanup_age_s: engines of killed runs,
    which never reached their teardown and would hold their GPUs forever."""
    deleted = ctx.target.cleanup(ctx.config)
    return {"deleted": deleted}
