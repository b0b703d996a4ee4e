"""Validate the result tables with Great Expectations, one suite per table.

The suites in expectations/ are generated from tasks/state/tables.py (`dayone step`-free:
`python -m tasks.publish.validate --write-suites`), so the schema is defined once; a test keeps them in sync.
great_expectations is imported only inside functions: it costs seconds and DAG files parse often.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.state.storage import RunDir
from tasks.state.documents import VALIDATION
from tasks.state.tables import TABLES, Table

log = logging.getLogger("dayone.validate")

SUITES_DIR = Path(os.environ.get("DAYONE_EXPECTATIONS", Path(__file__).resolve().parents[2] / "expectations"))

# Semantic expectations beyond the schema: (table, expectation type, kwargs).
_EXTRA: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("requests", "expect_column_pair_values_a_to_be_greater_than_b",
     {"column_A": "e2e_s", "column_B": "ttft_s", "or_equal": True, "ignore_row_if": "either_value_is_missing"}),
    ("requests", "expect_column_pair_values_a_to_be_greater_than_b",
     {"column_A": "ttft_s", "column_B": "first_event_s", "or_equal": True, "ignore_row_if": "either_value_is_missing"}),
    ("rounds", "expect_column_pair_values_a_to_be_greater_than_b",
     {"column_A": "ttft_p99_s", "column_B": "ttft_p50_s", "or_equal": True, "ignore_row_if": "either_value_is_missing"}),
    ("cache_trials", "expect_column_values_to_be_between", {"column": "trial", "min_value": 0, "max_value": 1000}),
)


def _one_load(table: Table) -> list[dict[str, Any]]:
    """A round's load is a concurrency (closed loop) or a rate (open loop): exactly one of the two per row,
    and an in-flight cap only beside a rate."""
    if not {"concurrency", "rate_rps"} <= set(table.column_names):
        return []
    # GX's condition objects as JSON (its string conditions are deprecated)
    open_loop = {"row_condition": {"type": "nullity", "column": {"name": "rate_rps"}, "is_null": False}}
    closed_loop = {"row_condition": {"type": "nullity", "column": {"name": "rate_rps"}, "is_null": True}}
    exps = [{"type": "expect_column_values_to_be_null", "kwargs": {"column": "concurrency", **open_loop}},
            {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "concurrency", **closed_loop}}]
    if "max_in_flight" in table.column_names:
        exps.append({"type": "expect_column_values_to_be_null", "kwargs": {"column": "max_in_flight", **closed_loop}})
    return exps


def build_suite(table: Table) -> dict[str, Any]:
    exps: list[dict[str, Any]] = [
        {"type": "expect_table_columns_to_match_ordered_list", "kwargs": {"column_list": table.column_names}}
    ]
    for c in table.columns:
        if not c.nullable:
            exps.append({"type": "expect_column_values_to_not_be_null", "kwargs": {"column": c.name}})
        if c.values:
            exps.append({"type": "expect_column_values_to_be_in_set",
                         "kwargs": {"column": c.name, "value_set": list(c.values)}})
        if (c.min_value is not None or c.max_value is not None) and c.dtype in ("int", "float"):
            bounds = {k: v for k, v in (("min_value", c.min_value), ("max_value", c.max_value)) if v is not None}
            exps.append({"type": "expect_column_values_to_be_between", "kwargs": {"column": c.name, **bounds}})
    if table.key:
        exps.append({"type": "expect_compound_columns_to_be_unique",
                     "kwargs": {"column_list": list(table.key), "ignore_row_if": "never"}})
    exps += [{"type": t, "kwargs": k} for name, t, k in _EXTRA if name == table.name]
    exps += _one_load(table)
    return {"name": f"dayone_{table.name}", "meta": {"table": table.name, "generated_from": "tasks/state/tables.py"},
            "expectations": exps}


def write_suites(directory: Path = SUITES_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for table in TABLES.values():
        p = directory / f"{table.name}.json"
        p.write_text(json.dumps(build_suite(table), indent=2) + "\n", encoding="utf-8")
        out.append(p)
    return out


def _suite_text(table: str, directory: Path) -> str:
    return (directory / f"{table}.json").read_text(encoding="utf-8")


def load_suite(table: str, directory: Path = SUITES_DIR) -> dict[str, Any]:
    return json.loads(_suite_text(table, directory))


def validate_frames(frames: dict[str, pd.DataFrame], directory: Path = SUITES_DIR) -> dict[str, Any]:
    """Validate each frame against its table's suite; returns JSON-able results per table.

    A table without rows whose columns are the schema's is not handed to Great Expectations: every
    expectation holds on it by construction, and each suite costs a third of a second or more however small
    the frame. It is recorded as validated with no expectation evaluated."""
    empty = {name: {"success": True, "rows": 0, "failed": [], "evaluated": 0} for name, f in frames.items()
             if f.empty and list(f.columns) == TABLES[name].column_names}
    with_rows = {name: frame for name, frame in frames.items() if name not in empty}
    results = _validate_with_gx(with_rows, directory) if with_rows else {}
    return {name: empty.get(name) or results[name] for name in frames}


class _GxSession:
    """Great Expectations' context, its pandas source, a batch definition per table and the suites built so
    far: made once per process and reused by every validation in it. Building them costs GX about half a
    second per table each time (asset models, expectation classes, first-call work), four times what
    validating a passing table costs (bench/validate_cost.py); a process that runs several runs (dag.test(),
    a long-lived worker) paid it per run. One validation at a time: GX's context is not thread-safe."""

    def __init__(self) -> None:
        import great_expectations as gx

        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        context = gx.get_context(mode="ephemeral")
        try:
            context.variables.progress_bars = {"globally": False}  # keep task logs readable
        except Exception:  # noqa: BLE001  (older/newer config shapes: the bars are cosmetic)
            pass
        self.source = context.data_sources.add_pandas("dayone")
        self.batches: dict[str, Any] = {}
        self.suites: dict[tuple[str, str], Any] = {}
        self.lock = threading.Lock()

    def batch(self, table: str, frame: pd.DataFrame) -> Any:
        if table not in self.batches:
            self.batches[table] = self.source.add_dataframe_asset(table).add_batch_definition_whole_dataframe("all")
        return self.batches[table].get_batch(batch_parameters={"dataframe": frame})

    def suite(self, table: str, directory: Path) -> Any:
        """The table's suite as its file in `directory` says now (a changed file is built again)."""
        from great_expectations.core import ExpectationSuite
        from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

        text = _suite_text(table, directory)
        if (table, text) not in self.suites:
            doc = json.loads(text)
            self.suites[(table, text)] = ExpectationSuite(
                name=doc["name"],
                expectations=[ExpectationConfiguration(type=e["type"], kwargs=e["kwargs"]) for e in doc["expectations"]])
        return self.suites[(table, text)]


@functools.cache
def _gx_session() -> _GxSession:
    return _GxSession()


def _validate_with_gx(frames: dict[str, pd.DataFrame], directory: Path) -> dict[str, Any]:
    gx = _gx_session()
    results: dict[str, Any] = {}
    with gx.lock:
        for name, frame in frames.items():
            suite, batch = gx.suite(name, directory), gx.batch(name, frame)
            # Pass or fail alone costs half of GX's default summary, which gathers unexpected values for every
            # expectation (bench/validate_cost.py); a failed table is validated again for its failures' counts.
            res = batch.validate(suite, result_format="BOOLEAN_ONLY")
            if not res.success:
                res = batch.validate(suite)
            failed = [
                {"expectation": r.expectation_config.type, "kwargs": _short(r.expectation_config.kwargs),
                 "unexpected_count": (r.result or {}).get("unexpected_count")}
                for r in res.results if not r.success
            ]
            results[name] = {"success": bool(res.success), "rows": int(len(frame)), "failed": failed,
                             "evaluated": len(res.results)}
    return results


def _short(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k in ("column", "column_list", "column_A", "column_B", "value_set")}


def validate_run(run_dir: RunDir) -> dict[str, Any]:
    """Validate every table of the run; write validation.json; a failure means quarantine."""
    frames = {name: run_dir.frame(name) for name in TABLES}
    results = validate_frames(frames)
    doc = {"success": all(r["success"] for r in results.values()), "tables": results}
    run_dir.write_json(VALIDATION, doc)
    for name, r in results.items():
        if not r["success"]:
            log.warning("table %s failed validation: %s", name, r["failed"])
    return {"success": doc["success"], "failed_tables": [n for n, r in results.items() if not r["success"]]}


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-suites"]:
        for path in write_suites():
            print(path)
    else:
        print("usage: python -m tasks.publish.validate --write-suites", file=sys.stderr)
        sys.exit(2)
