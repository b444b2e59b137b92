"""The OpenAPI description of ``/api/v1/usage`` (the usage report), part of ``openapi``'s
document."""

from __future__ import annotations

from typing import Any

_TIME = {"type": "string", "format": "date-time"}
_NUM = {"type": "number", "minimum": 0}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_USAGE_FIGURES = {"energyJoules": _NUM, "energyKwh": _NUM, "attributedJoules": _NUM,
                  "idleShareJoules": _NUM, "cost": {"type": "number"}, "co2eGrams": _NUM}
_USAGE = {
    "type": "object", "required": ["from", "to", "by", "step", "rows", "totals"],
    "properties": {
        "from": _TIME, "to": _TIME, "by": {"type": "array", "items": {"type": "string"}},
        "step": {"type": "string", "enum": ["hour", "day", "month"], "nullable": True},
        "node": {"type": "string"}, "currency": {"type": "string"},
        "rows": {"type": "array", "items": {
            "type": "object",
            "required": ["periodStart", "periodEnd", "group", "energyJoules", "energyKwh"],
            "properties": {"periodStart": _TIME, "periodEnd": _TIME,
                           "group": {"type": "object", "additionalProperties": {
                               "type": "string", "nullable": True}},
                           **_USAGE_FIGURES}}},
        "totals": {"type": "object", "required": ["energyJoules", "energyKwh"],
                   "properties": _USAGE_FIGURES}},
}
_MONTH_TEXT = r"(19[7-9][0-9]|2[0-9]{3})-(0[1-9]|1[0-2])"
_PERIOD_TEXT = {"type": "string", "pattern": f"^{_MONTH_TEXT}(-(0[1-9]|1[0-9]|2[0-8])"
                                             r"(T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
                                             r"(\.[0-9]+)?(Z|[+-]0[0-9]:[0-5][0-9]))?)?$",
                "description": "days 29 to 31 are taken too where the month has them"}
_GROUP_FIELDS = "(tenant|kind|namespace|pod|container|service|user|job|node|gpu)"


def usage_path(error: dict[str, Any]) -> dict[str, Any]:
    """``/api/v1/usage``: energy, cost and CO2e from the usage database; ``error`` is the
    document's error body."""
    def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {"name": name, "in": "query", "required": False, "schema": schema,
                "description": description}

    parameters = [
        query("from", _PERIOD_TEXT, "period start: RFC 3339 with its offset, YYYY-MM-DD or "
                                    "YYYY-MM (UTC); default this month's start"),
        query("to", _PERIOD_TEXT, "period end (exclusive); a day or month means its end; "
                                  "default now"),
        query("month", {"type": "string", "pattern": f"^{_MONTH_TEXT}$"},
              "the period: one month (instead of from and to)"),
        query("by", {"type": "string", "pattern": f"^{_GROUP_FIELDS}(,{_GROUP_FIELDS})*$"},
              "fields to group by, comma-separated (default tenant)"),
        query("step", {"type": "string", "enum": ["hour", "day", "month"]},
              "one row per hour, day or month (default: the whole period)"),
        query("format", {"type": "string", "enum": ["json", "csv"]},
              "csv: FinOps FOCUS columns (else Accept: text/csv; JSON by default)"),
    ]
    return {"get": {
        "operationId": "getUsage", "parameters": parameters,
        "description": "Energy (kWh), cost and CO2e per period and group, from the hourly and "
                       "daily rows the daemon keeps (docs/usage.md).",
        "responses": {
            "200": {"description": "the rows and their totals",
                    "content": {"application/json": {"schema": _USAGE},
                                "text/csv": {"schema": {"type": "string"}}}},
            "400": _json(error, "a parameter is malformed, repeated or unknown, or the "
                                 "period is empty"),
            "404": _json(error, "usage is not recorded"),
            "413": _json(error, "the answer would exceed 10,000 rows"),
            "429": _json(error, "two usage queries are running already"),
            "503": _json(error, "no usage recorded yet, or the query ran past its time")}}}
