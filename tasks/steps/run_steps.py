"""The run-level steps' bodies: pinning (now, or from the digest catalog for a dated run), the cleanup
of killed runs' engines, the nightly's comparison, the tables' validation, the archive and the report."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tasks.config import ConfigError, RunConfig, parse_run_config
from tasks.publish.catalog import CatalogError, date_label, entry_key, list_dates, read_entry, record, with_digests
from tasks.steps.context import RunContext
from tasks.state.documents import MANIFEST, OPENWEBUI_PINNED, PINNED, manifest, pinned

log = logging.getLogger("dayone.catalog")


def pin_now(ctx: RunContext) -> dict[str, str]:
    """Resolve the model's revision to a commit and each engine's identity (image digests, or local command
    line and version) now; the engines are pinned, and later started, with that commit."""
    from tasks.evidence.revision import record_resolved_revision, served_config

    resolved = record_resolved_revision(ctx)
    cfg = served_config(ctx.config, ctx.run_dir)
    found = {e.name: ctx.target.pin(cfg, e) for e in cfg.engines}
    _same_image_across_variants(cfg, found)
    ctx.run_dir.write_json(PINNED, found)
    doc = manifest(ctx.run_dir) or {}
    doc["pinned"] = found
    doc["model_revision"] = resolved
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
    return pin_for_date(ctx, pin_now)


def pin_for_date(ctx: RunContext, pin_now: Callable[[RunContext], dict[str, str]]) -> dict[str, Any]:
    """Pin a dated run (`ctx.logical_date`): reuse the date's catalog entry, or pin now and record it.

    - explicit engines[].digest in the conf: those are used (nothing is resolved for them);
    - the date has an entry: its digests are used; an engine whose identity cannot be pinned to
      an older digest (a local process) must still match it, or the run fails saying so;
    - no entry and a backfill: fail, naming the date and the fix (a backfill never pins today's images
      under an old date);
    - no entry and a scheduled run: pin the current digests (`pin_now`) and record them.
    """
    cfg, logical_date, s3 = ctx.config, ctx.logical_date, ctx.s3()
    entry = read_entry(s3, cfg, logical_date)
    explicit = all(e.digest for e in cfg.engines)
    if entry is None and ctx.backfill and not explicit:
        raise CatalogError(
            f"no digests recorded in s3://{cfg.archive.bucket}/{entry_key(cfg, logical_date)} for "
            f"{date_label(logical_date)}. Fix: give engines[].digest in the run conf, or backfill dates the "
            f"catalog has ({', '.join(list_dates(s3, cfg)[-5:]) or 'none yet'})"
        )
    if entry is not None:
        dated = parse_run_config(with_digests(cfg.model_dump(mode="json", exclude_unset=True), entry))
        ctx = replace(ctx, config=dated)
    digests = pin_now(ctx)
    if entry is not None:
        wrong = {name: (entry["engines"][name]["image_digest"], got) for name, got in digests.items()
                 if name in entry["engines"] and not cfg.engine(name).digest  # the conf's own digest wins
                 and entry["engines"][name]["image_digest"] != got}
        if wrong:
            raise CatalogError("; ".join(
                f"engine {name}: the catalog has {want} for {date_label(logical_date)} but it pins to {got} "
                f"(a local engine cannot be run at an older identity). Fix: run it on target=kubernetes with "
                f"an image, or give engines[].digest" for name, (want, got) in sorted(wrong.items())))
        source = "catalog"
    else:
        entry = record(s3, cfg, logical_date, pinned(ctx.run_dir), ctx.run_id, ctx.run_dir.read_json(OPENWEBUI_PINNED))
        source = "pinned now" if not explicit else "run conf"
    log.info("run %s pinned from %s for %s: %s", ctx.run_id, source, date_label(logical_date), digests)
    return {"source": source, "logical_date": date_label(logical_date), "digests": digests}


def compare(ctx: RunContext, _: None = None) -> dict[str, Any]:
    """The nightly's regression check against the last good run and the reference (tasks/compare/nightly.py)."""
    ctx.planned()
    from tasks.compare.nightly import compare_run

    return compare_run(ctx.run_dir, ctx.config, ctx.s3(), ctx.accepted_run_ids)


def validate(ctx: RunContext, _: None = None) -> dict[str, Any]:
    ctx.planned()
    from tasks.publish.validate import validate_run

    return validate_run(ctx.run_dir)


def archive(ctx: RunContext, _: None = None) -> dict[str, Any]:
    ctx.planned()
    from tasks.publish.archive import archive_run

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
