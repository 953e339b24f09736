"""A data-analysis run: upload a CSV into a sandbox, let code there summarise it and
draw a chart, and download the chart.

The chart is an SVG drawn with the standard library, so the sandbox needs nothing but
python3 (the host image has it) and no network.

    AIRLOCK_SOCKET=/run/airlock/airlock.sock python3 examples/data_analysis.py [OUT.svg]
"""

from __future__ import annotations

import json
import sys
import uuid

sys.path.insert(0, __file__.rsplit("/examples/", 1)[0] + "/sdk/python")

from airlock import Sandbox  # noqa: E402

CSV = """month,signups
2026-01,120
2026-02,135
2026-03,180
2026-04,165
2026-05,210
2026-06,260
"""

ANALYSIS = r'''
import csv, json
rows = list(csv.DictReader(open("/root/data/signups.csv")))
values = [int(r["signups"]) for r in rows]
w, h, pad = 480, 240, 30
top = max(values)
bar = (w - 2 * pad) / len(values)
parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">']
for i, (r, v) in enumerate(zip(rows, values)):
    bh = (h - 2 * pad) * v / top
    x, y = pad + i * bar, h - pad - bh
    parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar * 0.8:.1f}" height="{bh:.1f}" fill="#4a7"/>')
    parts.append(f'<text x="{x:.1f}" y="{h - pad + 14}" font-size="10">{r["month"]}</text>')
parts.append("</svg>")
open("/root/out/chart.svg", "w").write("\n".join(parts))
print(json.dumps({"months": len(values), "total": sum(values), "best": rows[values.index(top)]["month"]}))
'''


def run(out_path: str) -> dict:
    name = "analysis-" + uuid.uuid4().hex[:8]
    with Sandbox.create(name, network="none") as sb:
        sb.files.mkdir("/root/data", parents=True)
        sb.files.mkdir("/root/out", parents=True)
        sb.files.write("/root/data/signups.csv", CSV)
        sb.files.write("/root/analyse.py", ANALYSIS)
        res = sb.exec(["python3", "/root/analyse.py"], timeout=60)
        if res.exit_code != 0:
            raise SystemExit(f"analysis failed: {res.stderr}")
        summary = json.loads(res.stdout)
        chart = sb.files.read("/root/out/chart.svg")
    with open(out_path, "wb") as f:
        f.write(chart)
    print("summary:", summary, "chart:", out_path)
    return summary


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "chart.svg"
    s = run(out)
    sys.exit(0 if s == {"months": 6, "total": 1070, "best": "2026-06"} else 1)
