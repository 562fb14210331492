#!/usr/bin/env python3
"""Offline checks of the Grafana dashboards and the rules (no Prometheus needed).

- every dashboard is provisioning-ready: valid JSON, a uid, a DS_PROMETHEUS datasource variable
  and every panel and target on it, unique panel ids, panels inside the 24-column grid;
- every recording-rule name a dashboard or rule uses is defined in recording.yml;
- every other name is a series a kvgate server, vLLM, kvgate run or Prometheus itself exports
  (the integration test then checks they really exist).
Usage: dashboards_test.py DASHBOARDS_DIR
"""
import json
import pathlib
import sys

import metric_names

# Raw series the dashboards may use: vLLM's names (kvgate serve exports them too), kvgate serve's
# readkv_* ledgers and kvgate_request_errors_total, kvgate run's kvgate_run_*/kvgate_gate_*.
RAW_PREFIXES = ("vllm:", "readkv_", "kvgate_run_", "kvgate_gate_", "kvgate_request_errors_")
RAW_EXACT = {"up"}

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def check_expr_parser():
    names = metric_names.names_in_expr(
        'histogram_quantile(0.99, sum by (job, le) (rate(a:b_bucket{job="x",le=~"1|2"}[5m])))'
        ' / ignoring(job) (c offset 5m) > bool on() group_left() d{$var="1"}')
    check(names == {"a:b_bucket", "c", "d"}, f"names_in_expr parsed {sorted(names)}")


def check_dashboard(path):
    board = json.loads(path.read_text())
    check(board.get("uid"), f"{path.name}: no uid")
    variables = {v["name"]: v for v in board.get("templating", {}).get("list", [])}
    ds = variables.get("DS_PROMETHEUS")
    check(ds and ds.get("type") == "datasource" and ds.get("query") == "prometheus",
          f"{path.name}: no DS_PROMETHEUS datasource variable")
    ids = set()
    for panel in board.get("panels", []):
        pid = panel.get("id")
        check(pid not in ids, f"{path.name}: panel id {pid} twice")
        ids.add(pid)
        grid = panel.get("gridPos", {})
        check(grid.get("x", 0) + grid.get("w", 0) <= 24, f"{path.name}: panel {pid} past column 24")
        if panel.get("type") == "row":
            continue
        check(panel.get("datasource", {}).get("uid") == "${DS_PROMETHEUS}",
              f"{path.name}: panel {pid} ({panel.get('title')}) not on ${{DS_PROMETHEUS}}")
        targets = panel.get("targets", [])
        check(targets, f"{path.name}: panel {pid} ({panel.get('title')}) has no query")
        for target in targets:
            check(target.get("datasource", {}).get("uid") == "${DS_PROMETHEUS}",
                  f"{path.name}: panel {pid} target {target.get('refId')} not on ${{DS_PROMETHEUS}}")
            check(metric_names.names_in_expr(target.get("expr", "")),
                  f"{path.name}: panel {pid} target {target.get('refId')} selects no series")


def main():
    root = pathlib.Path(sys.argv[1])
    check_expr_parser()
    boards = metric_names.dashboard_files(root)
    check(len(boards) >= 2, f"expected the rollout and gates dashboards, found {len(boards)}")
    for board in boards:
        check_dashboard(board)
    recorded = metric_names.recorded_names(root / "rules" / "recording.yml")
    used = metric_names.all_names(root)
    for name, where in sorted(used.items()):
        if ":" in name and not name.startswith("vllm:"):
            check(name in recorded, f"{name} (used in {where[0]}) is no recording rule")
        else:
            check(name.startswith(RAW_PREFIXES) or name in RAW_EXACT,
                  f"{name} (used in {where[0]}) is no series kvgate or vLLM exports")
    for failure in failures:
        print("FAIL:", failure)
    print(f"{len(boards)} dashboards, {len(used)} metric names, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
