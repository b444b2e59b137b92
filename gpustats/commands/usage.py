"""``gpustats usage``: the usage report from a stopped daemon's state dir, or from a running
daemon's API (``--url``), as a table, CSV (FOCUS columns) or JSON."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Sequence

from gpustats.engine.statedir import user_state_dir
from gpustats.usage.database import FILE_NAME, open_database
from gpustats.usage.query import (
    GROUP_COLUMNS, STEPS, QueryError, QueryTimeout, TooManyRows, parse_query, run_query,
)
from gpustats.usage.report import focus_csv, report_dict, table

DEFAULT_STATE_DIR = "/var/lib/gpustats"
MAX_ANSWER_BYTES = 64 << 20


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpustats usage",
        description="Energy (kWh), cost and CO2e by period and tenant field, from the usage "
                    "a gpustats daemon recorded.",
        epilog="examples:\n  gpustats usage --month 2026-11 --by job\n"
               "  gpustats usage --url http://127.0.0.1:9477 --from 2026-11-01 --to 2026-11-07"
               " --by namespace --step day --format csv",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state-dir", metavar="PATH",
                        help="the state dir of a daemon (default: $GPUSTATS_STATE_DIR, else "
                             f"{DEFAULT_STATE_DIR}, else the user's own as the daemon "
                             "chooses it)")
    parser.add_argument("--url", metavar="URL",
                        help="ask a running daemon's API at this base URL instead")
    parser.add_argument("--month", metavar="YYYY-MM", help="the period: one month (UTC)")
    parser.add_argument("--from", dest="start", metavar="TIME",
                        help="period start: RFC 3339, YYYY-MM-DD or YYYY-MM (default: this "
                             "month's start)")
    parser.add_argument("--to", dest="end", metavar="TIME",
                        help="period end (a day or month: its end; default: now)")
    parser.add_argument("--by", default="tenant",
                        help=f"fields to group by, comma-separated: {', '.join(GROUP_COLUMNS)}"
                             " (default tenant)")
    parser.add_argument("--step", choices=STEPS, help="one row per hour, day or month "
                                                      "(default: the whole period)")
    parser.add_argument("--format", choices=("table", "csv", "json"), default="table")
    return parser


def _values(args: argparse.Namespace) -> dict[str, list[str]]:
    pairs = {"month": args.month, "from": args.start, "to": args.end, "by": args.by,
             "step": args.step}
    return {k: [v] for k, v in pairs.items() if v is not None}


def _from_api(url: str, values: dict[str, list[str]], fmt: str) -> str:
    query = {k: v[0] for k, v in values.items()}
    query["format"] = "csv" if fmt == "csv" else "json"
    full = url.rstrip("/") + "/api/v1/usage?" + urllib.parse.urlencode(query)
    try:
        with urllib.request.urlopen(full, timeout=30) as response:   # nosec B310 (user's URL)
            text: str = response.read(MAX_ANSWER_BYTES).decode()
            return text
    except urllib.error.HTTPError as exc:
        body = exc.read(4096).decode(errors="replace")
        try:
            message = json.loads(body)["message"]
        except (ValueError, KeyError, TypeError):
            message = body
        raise RuntimeError(f"{full}: {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError(f"{full}: {exc}") from None


def _from_state_dir(state_dir: str, values: dict[str, list[str]], fmt: str) -> str:
    path = os.path.join(state_dir, FILE_NAME)
    if not os.path.exists(path):
        raise RuntimeError(f"no usage database in {state_dir} ({FILE_NAME})")
    query = parse_query(values, time.time())
    connection = open_database(path, read_only=True)
    try:
        rows = run_query(connection, query, seconds=60.0)
        stored = connection.execute("SELECT value FROM meta WHERE key='currency'").fetchone()
    finally:
        connection.close()
    currency = stored[0] if stored else None
    if fmt == "csv":
        return focus_csv(query, rows, currency)
    return json.dumps(report_dict(query, rows, currency), indent=2) + "\n"


def _default_state_dir() -> str:
    """The daemon's: ``$GPUSTATS_STATE_DIR``, else the default where it holds usage, else the
    user's own (where a daemon not run as root keeps it)."""
    given = os.environ.get("GPUSTATS_STATE_DIR")
    if given:
        return given
    if os.path.exists(os.path.join(DEFAULT_STATE_DIR, FILE_NAME)):
        return DEFAULT_STATE_DIR
    return user_state_dir(os.environ)


def main(argv: Sequence[str]) -> int:
    args = build_parser().parse_args(argv)
    values = _values(args)
    fmt = args.format
    try:
        if args.url:
            text = _from_api(args.url, values, fmt)
        else:
            text = _from_state_dir(args.state_dir or _default_state_dir(), values, fmt)
        if fmt == "table":
            text = table(json.loads(text))
    except (QueryError, TooManyRows, QueryTimeout, RuntimeError, sqlite3.Error,
            ValueError) as exc:
        print(f"gpustats usage: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0
