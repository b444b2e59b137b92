"""A usage answer as JSON, as FOCUS-shaped CSV, or as a table for people (pure)."""

from __future__ import annotations

import csv
import io
import json
import time
from typing import Any, Iterable

from gpustats.usage.database import JOULES_PER_KWH
from gpustats.usage.query import UsageQuery, UsageRow

# FinOps FOCUS columns (FOCUS 1.x names; ``x_`` marks columns of our own, as FOCUS asks).
FOCUS_COLUMNS = (
    "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart", "ChargePeriodEnd",
    "ChargeCategory", "ChargeDescription", "ServiceCategory", "ServiceName", "ResourceId",
    "ResourceName", "ResourceType", "ConsumedQuantity", "ConsumedUnit", "BilledCost",
    "EffectiveCost", "BillingCurrency", "Tags", "x_EnergyJoules", "x_AttributedJoules",
    "x_IdleShareJoules", "x_CarbonEmissionsGramsCO2e",
)


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _group(query: UsageQuery, row: UsageRow) -> dict[str, str | None]:
    return dict(zip(query.by, row.group))


def report_dict(query: UsageQuery, rows: Iterable[UsageRow], currency: str | None,
                node: str | None = None) -> dict[str, Any]:
    """The JSON answer: the question, each row, and the totals. Cost and CO2e are absent
    where no price or intensity was set for any of the row's hours."""
    out = []
    total_j = total_a = total_i = 0.0
    total_cost: float | None = None
    total_co2e: float | None = None
    for row in rows:
        item: dict[str, Any] = {
            "periodStart": rfc3339(row.period_start), "periodEnd": rfc3339(row.period_end),
            "group": _group(query, row), "energyJoules": row.energy_joules,
            "energyKwh": row.energy_kwh, "attributedJoules": row.attributed_joules,
            "idleShareJoules": row.idle_joules}
        if row.cost is not None:
            item["cost"] = row.cost
            total_cost = (total_cost or 0.0) + row.cost
        if row.co2e_grams is not None:
            item["co2eGrams"] = row.co2e_grams
            total_co2e = (total_co2e or 0.0) + row.co2e_grams
        total_j += row.energy_joules
        total_a += row.attributed_joules
        total_i += row.idle_joules
        out.append(item)
    totals: dict[str, Any] = {"energyJoules": total_j, "energyKwh": total_j / JOULES_PER_KWH,
                              "attributedJoules": total_a, "idleShareJoules": total_i}
    if total_cost is not None:
        totals["cost"] = total_cost
    if total_co2e is not None:
        totals["co2eGrams"] = total_co2e
    answer: dict[str, Any] = {"from": rfc3339(query.start), "to": rfc3339(query.end),
                              "by": list(query.by), "step": query.step}
    if node is not None:
        answer["node"] = node
    if currency is not None:
        answer["currency"] = currency
    answer.update(rows=out, totals=totals)
    return answer


def _resource(group: dict[str, str | None]) -> str:
    return ",".join(f"{k}={'' if v is None else v}" for k, v in group.items())


def focus_csv(query: UsageQuery, rows: Iterable[UsageRow], currency: str | None) -> str:
    """One CSV line per row, FOCUS's column names first: the query's period is the billing
    period, the row's the charge period, kWh the consumed quantity, the group the resource
    (and its tags, as a JSON object)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(FOCUS_COLUMNS)
    start, end = rfc3339(query.start), rfc3339(query.end)
    for row in rows:
        group = _group(query, row)
        name = next((v for v in reversed(row.group) if v is not None), "")
        kind = group.get("kind")
        cost = "" if row.cost is None else repr(row.cost)
        writer.writerow((
            start, end, rfc3339(row.period_start), rfc3339(row.period_end), "Usage",
            "GPU energy billed to the group (attributed and idle share)", "Compute",
            "GPU energy", _resource(group), name, kind or "+".join(query.by),
            repr(row.energy_kwh), "kWh", cost, cost,
            currency if row.cost is not None and currency else "",
            json.dumps({k: v for k, v in group.items() if v is not None}, sort_keys=True),
            repr(row.energy_joules), repr(row.attributed_joules), repr(row.idle_joules),
            "" if row.co2e_grams is None else repr(row.co2e_grams)))
    return buffer.getvalue()


def table(answer: dict[str, Any], width: int = 100) -> str:
    """The JSON answer as aligned columns for a terminal."""
    by = answer["by"]
    heads = ["period", *by, "kWh", "cost", "gCO2e"]
    lines = []
    for row in answer["rows"]:
        period = row["periodStart"][:16].replace("T", " ")
        lines.append([period, *(("-" if row["group"].get(f) is None else
                                 str(row["group"][f])) for f in by),
                      f"{row['energyKwh']:.3f}",
                      "-" if "cost" not in row else f"{row['cost']:.2f}",
                      "-" if "co2eGrams" not in row else f"{row['co2eGrams']:.0f}"])
    totals = answer["totals"]
    lines.append(["total", *([""] * len(by)), f"{totals['energyKwh']:.3f}",
                  "-" if "cost" not in totals else f"{totals['cost']:.2f}",
                  "-" if "co2eGrams" not in totals else f"{totals['co2eGrams']:.0f}"])
    widths = [min(max(len(r[i]) for r in [heads, *lines]), width // 2)
              for i in range(len(heads))]
    out = [f"usage {answer['from']} to {answer['to']}"
           + (f", cost in {answer['currency']}" if "currency" in answer else "")]
    for line in [heads, *lines]:
        cells = [c[:w].ljust(w) if i <= len(by) else c.rjust(w)
                 for i, (c, w) in enumerate(zip(line, widths))]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out) + "\n"
