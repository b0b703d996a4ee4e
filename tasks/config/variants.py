"""Experiments: a base engine and factors, expanded into variants that differ in declared settings only.

The method of the GLM-5.3-Flash Day 1 Hands-on report, "target-only baseline first, then one switch
at a time": an experiment names its base engine (one of `engines`) and its factors, each a setting of
the engine spec with levels; DayOne expands them into variants named after their change
(`llamacpp-parallel4`) and refuses a hand-written variant with an undeclared difference (PROTOCOL.md
section 8, "Experiments"). Pure functions over raw config dicts and parsed engine specs: the config
section (Experiment, Factor) is tasks/config/experiment.py, which calls these while it validates, so
nothing here imports the config; the measuring design is placement (tasks/steps/lanes.py).
"""

from __future__ import annotations

import copy
import itertools
import random
import re
from collections.abc import Iterable
from typing import Any

# Settings that name the variant, not a change of it.
NOT_SETTINGS = ("name",)
NAME_MAX = 40


def setting_parts(setting: str) -> list[str]:
    return [p for p in setting.split(".") if p]


def effective(spec: Any) -> dict[str, Any]:
    """The spec as flat setting -> value, defaults filled in: leaving a field out and giving its default
    are the same engine (llama.cpp settings and the simulator's profile have their own defaults)."""
    from tasks.config.sim_profile import Profile

    doc = spec.model_dump(mode="json")
    doc["llamacpp"] = spec.llamacpp_settings.model_dump(mode="json") if spec.launcher == "llamacpp" or spec.llamacpp \
        else None
    if spec.launcher == "sim":
        doc["sim_profile"] = {**Profile().model_dump(mode="json"), **spec.sim_profile}
    return dict(_flatten(doc))


def _flatten(value: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):  # an empty dict yields nothing: env {} and env left out are one engine
        for k, v in value.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, value


def covers(setting: str, path: str) -> bool:
    """Whether declaring `setting` declares the flat path `path` (llamacpp covers llamacpp.parallel)."""
    return path == setting or path.startswith(setting + ".")


def differences(base: Any, variant: Any) -> dict[str, tuple[Any, Any]]:
    """Flat setting -> (base value, variant value) where the two engines differ."""
    a, b = effective(base), effective(variant)
    out = {}
    for path in sorted(set(a) | set(b)):
        if path.split(".")[0] in NOT_SETTINGS:
            continue
        va, vb = a.get(path), b.get(path)  # a dict given on one side only: its keys are None on the other
        if va != vb:
            out[path] = (va, vb)
    return out


def undeclared(base: Any, variant: Any, declared: Iterable[str]) -> dict[str, tuple[Any, Any]]:
    declared = list(declared)
    return {p: d for p, d in differences(base, variant).items() if not any(covers(s, p) for s in declared)}


# ---- expansion -------------------------------------------------------------------------------------


def get_setting(doc: dict[str, Any], setting: str) -> Any:
    cur: Any = doc
    for part in setting_parts(setting):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def set_setting(doc: dict[str, Any], setting: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    cur = out
    parts = setting_parts(setting)
    for part in parts[:-1]:
        if not isinstance(cur.get(part), dict):
            cur[part] = {}
        cur = cur[part]
    cur[parts[-1]] = copy.deepcopy(value)
    return out


def _slug(value: Any) -> str | None:
    """A value short and plain enough to name a variant by; None for the others (a URL, a path, a list:
    a name must not carry a host or a secret into tables and the archive)."""
    if isinstance(value, bool | int | float):
        text = str(value).lower()
    elif isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,16}", value):
        text = value
    else:
        return None
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or None


def label(setting: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", setting_parts(setting)[-1].lower().replace("_", "")) or "x"


def treatments(factors: list[tuple[str, list[Any]]], base_values: list[Any], one_at_a_time: bool) -> list[list[Any]]:
    """The variants' factor values: every combination but the base's, or each level of one factor at a
    time with the others at the base's values."""
    if one_at_a_time:
        out = []
        for i, (_, levels) in enumerate(factors):
            for level in levels:
                if level != base_values[i]:
                    out.append([level if j == i else base_values[j] for j in range(len(factors))])
        return out
    return [list(combo) for combo in itertools.product(*(levels for _, levels in factors)) if list(combo) != base_values]


def variant_name(base: str, changes: list[tuple[str, Any]], taken: set[str], index: int) -> str:
    """`<base>-<setting><value>` per change (llamacpp-parallel4), else `<base>-v<index>`."""
    slugs = [_slug(v) for _, v in changes]
    name = "-".join([base, *(f"{label(s)}{slug}" for (s, _), slug in zip(changes, slugs))])
    if None in slugs or len(name) > NAME_MAX or name in taken or not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", name):
        name = f"{base[:NAME_MAX - 5]}-v{index}"
    return name


def expand(base_doc: dict[str, Any], base_effective: dict[str, Any], factors: list[tuple[str, list[Any]]],
           one_at_a_time: bool, taken: set[str]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Raw engine dicts of the variants, each with its changed settings {setting: value}."""
    base_values = [_base_value(base_doc, base_effective, s) for s, _ in factors]
    out = []
    for i, values in enumerate(treatments(factors, base_values, one_at_a_time), start=1):
        changes = [(s, v) for (s, _), v, b in zip(factors, values, base_values) if v != b]
        doc = base_doc
        for s, v in changes:
            doc = set_setting(doc, s, v)
        name = variant_name(str(base_doc.get("name")), changes, taken, i)
        taken.add(name)
        doc = {**doc, "name": name}
        out.append((doc, dict(changes)))
    return out


def factor_level(factors: list[tuple[str, list[Any]]], changes: dict[str, Any]) -> tuple[int, int]:
    """Which factor and level made a variant invalid: the last change (the others made valid variants
    before, or are the only one)."""
    for i in reversed(range(len(factors))):
        setting, levels = factors[i]
        if setting in changes:
            return i, levels.index(changes[setting])
    return 0, 0


def _base_value(base_doc: dict[str, Any], base_effective: dict[str, Any], setting: str) -> Any:
    given = get_setting(base_doc, setting)
    if given is not None:
        return given
    return base_effective.get(setting)


# ---- design ----------------------------------------------------------------------------------------


def randomized_order(names: list[str], run_id: str | None) -> list[str]:
    """The variants' order for a run that cannot interleave: drawn from the run id, so a rerun of the
    same run id keeps it and successive runs spread slow drift over every variant alike."""
    order = list(names)
    random.Random(f"dayone-order/{run_id or ''}").shuffle(order)
    return order


def round_order(names: list[str], repetition: int) -> list[str]:
    """ABBA: forward on odd repetitions, backward on even ones, so a drift that grows linearly over the
    rounds adds the same to every variant over each pair of repetitions."""
    return list(names) if repetition % 2 == 1 else list(reversed(names))
