"""Metric names used by the dashboards and the rules, read from their PromQL expressions.

Used by dashboards_test.py (offline checks) and prometheus_integration_test.py (every name must
exist in a Prometheus that scraped real servers: no dead panel, no dead rule). A name counts when
it stands where a series selector stands: not a function, keyword, label, string or duration.
"""
import json
import pathlib
import re

# PromQL words that look like identifiers but are not metric names.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
             "and", "or", "unless", "inf", "nan", "atan2"}
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")
_NUMBER_WORD = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


def names_in_expr(expr):
    """The metric names a PromQL expression selects, as a set."""
    text = _VARIABLE.sub("1m", expr)  # Grafana variables ($__rate_interval, $model_name)
    text = _STRING.sub('""', text)
    text = _MATCHERS.sub("", text)
    text = _RANGE.sub("", text)
    text = _LABEL_LIST.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _KEYWORDS or _NUMBER_WORD.match(word):
            continue
        names.add(word)
    return names


def _grafana_exprs(node):
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            yield node["expr"]
        for value in node.values():
            yield from _grafana_exprs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _grafana_exprs(value)


def grafana_exprs(path):
    """Every PromQL expression of a Grafana dashboard JSON (panel targets, variable queries)."""
    board = json.loads(pathlib.Path(path).read_text())
    exprs = list(_grafana_exprs(board.get("panels", [])))
    for var in board.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and isinstance(query, str):
            # label_values(METRIC, label) -> METRIC
            match = re.match(r"\s*label_values\(\s*([^,]+),", query)
            exprs.append(match.group(1) if match else query)
    return exprs


def rule_exprs(path):
    """(record or alert name, expr) of every rule in a Prometheus rule file.

    The rule files are simple enough to read without a YAML library (which CI may lack): every
    `expr:` is either on one line or a `|` block indented below it.
    """
    rules = []
    lines = pathlib.Path(path).read_text().splitlines()
    name = None
    i = 0
    while i < len(lines):
        line = lines[i]
        header = re.match(r"\s*-?\s*(record|alert):\s*(\S+)", line)
        if header:
            name = header.group(2)
        expr = re.match(r"(\s*)expr:\s*(.*)$", line)
        if expr:
            indent, rest = len(expr.group(1)), expr.group(2).strip()
            if rest in ("|", ">", "|-", ">-"):
                body = []
                i += 1
                while i < len(lines) and (not lines[i].strip() or
                                          len(lines[i]) - len(lines[i].lstrip()) > indent):
                    body.append(lines[i].strip())
                    i += 1
                rules.append((name, " ".join(body)))
                continue
            rules.append((name, rest))
        i += 1
    return rules


def recorded_names(path):
    """Names a rule file records (they exist once the rules are loaded and evaluated)."""
    return {m.group(1) for m in re.finditer(r"^\s*-?\s*record:\s*(\S+)",
                                            pathlib.Path(path).read_text(), re.M)}


def dashboard_files(root):
    return sorted(pathlib.Path(root, "grafana").glob("*.json"))


def rule_files(root):
    return [pathlib.Path(root, "rules", "recording.yml"), pathlib.Path(root, "rules", "alerts.yml")]


def all_names(root):
    """{metric name: [where it is used]} over every dashboard and rule file under root."""
    used = {}
    for board in dashboard_files(root):
        for expr in grafana_exprs(board):
            for name in names_in_expr(expr):
                used.setdefault(name, []).append(board.name)
    for rules in rule_files(root):
        for rule, expr in rule_exprs(rules):
            for name in names_in_expr(expr):
                used.setdefault(name, []).append(f"{rules.name}:{rule}")
    return used
