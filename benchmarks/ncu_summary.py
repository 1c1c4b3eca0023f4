"""Nsight Compute's CSV (``ncu --csv --page details``) as JSON: per kernel, each metric with its unit.

Usage: ``python -m benchmarks.ncu_summary OUT.json LABEL=FILE.csv [LABEL=FILE.csv ...]`` (split at the last
``=``: a label may be a tuning set such as ``unit_t=True``) writes
``{"configs": {LABEL: {kernel: {"metric (unit)": value}}}}`` (a kernel profiled several times keeps
its last launch; values as ncu prints them, thousands separators removed). Lines before the CSV
header (the profiled program's own output, ncu's ``==PROF==`` lines) are skipped.
"""

from __future__ import annotations

import csv
import json
import sys

__all__ = ["summarise", "main"]


def summarise(lines) -> dict:
    """``{kernel: {"metric (unit)": value}}`` from the lines of one ncu CSV (module docstring).

    Raises
    ------
    ValueError
        No CSV header with ``Kernel Name``, ``Metric Name`` and ``Metric Value`` in the lines.
    """
    rows = [ln for ln in lines if ln.startswith('"')]
    reader = csv.DictReader(rows)
    if not reader.fieldnames or not {"Kernel Name", "Metric Name", "Metric Value"} <= set(reader.fieldnames):
        raise ValueError("no ncu CSV header (Kernel Name, Metric Name, Metric Value): was ncu run with --csv?")
    out: dict = {}
    for r in reader:
        kernel = r["Kernel Name"].split("(")[0]
        unit = r.get("Metric Unit") or ""
        name = f"{r['Metric Name']} ({unit})" if unit else r["Metric Name"]
        out.setdefault(kernel, {})[name] = r["Metric Value"].replace(",", "")
    return out


def main(argv=None) -> int:
    """Write the summary; 2 on a usage error or an unreadable file."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    doc = {"configs": {}}
    for spec in argv[1:]:
        label, path = spec.rsplit("=", 1)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                doc["configs"][label] = summarise(f)
        except (OSError, ValueError) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 2
    with open(argv[0], "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
