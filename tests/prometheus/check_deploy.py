#!/usr/bin/env python3
"""Checks wtx's monitoring files: the Prometheus alerting rules and the Grafana dashboard.

  check_deploy.py [check] --promtool PATH --root REPO_ROOT [--metrics NAME,NAME,...]
      (a) promtool check rules deploy/prometheus/wtx-rules.yml
      (b) promtool test rules tests/prometheus/wtx-rules.test.yml (run from REPO_ROOT; promtool
          resolves its rule_files relative to the test file)
      (c) every target expression of deploy/grafana/wtx.json (the panels of rows included), with
          the template variables replaced by plausible values ($__rate_interval -> 5m, $fleet ->
          .*, ...), parses: each is written as a recording rule `wtx_check:exprN` into a
          temporary rules file that promtool checks. A variable the dashboard does not define,
          an empty expression, or a panel or target whose data source is not the dashboard's
          data source variable fails too.
      (d) every metric name the rules and the dashboard use (tokens wtx_..., a histogram's
          _bucket/_sum/_count suffix stripped) is listed in the table of docs/observability.md
          or, when REPO_ROOT has no docs/observability.md, in --metrics.
      Each failure names the file, the alert or the panel (and target), and what is wrong.
      Exit 0 when everything passes, 1 on a failure, 2 on bad arguments, 77 (skip) when
      promtool cannot be run.
  check_deploy.py self-test --promtool PATH
      Runs the check on a tree it writes in a temporary folder (the real rules and their tests,
      and a dashboard with an expression that does not parse, in a collapsed row, and one with
      an unknown metric; a rules file with an unknown metric), and fails unless both the
      dashboard's and the rules' planted faults are named, and a clean tree passes.

Standard library only (run with /usr/bin/python3).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

RULES = "deploy/prometheus/wtx-rules.yml"
RULES_TEST = "tests/prometheus/wtx-rules.test.yml"
DASHBOARD = "deploy/grafana/wtx.json"
METRICS_DOC = "docs/observability.md"

# The exported families (docs/observability.md); used by self-test only.
SELF_TEST_METRICS = [
    "wtx_transactions_total", "wtx_aborts_total", "wtx_decisions_total",
    "wtx_bytes_written_total", "wtx_leader_changes_total", "wtx_phase_duration_seconds",
    "wtx_journal_sync_duration_seconds", "wtx_decision_log_duration_seconds",
    "wtx_coverage_ratio", "wtx_serving", "wtx_dirty", "wtx_held_info", "wtx_version_info",
    "wtx_transaction_start_timestamp_seconds", "wtx_committed_step",
]

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# Grafana's built-in variables, as a 6h dashboard with a 1m step would expand them.
BUILTIN_VARIABLES = {
    "__rate_interval": "5m",
    "__rate_interval_ms": "300000",
    "__interval": "1m",
    "__interval_ms": "60000",
    "__range": "6h",
    "__range_s": "21600",
    "__range_ms": "21600000",
    "__from": "1700000000000",
    "__to": "1700021600000",
}

# ${name}, ${name:format}, [[name]], [[name:format]], $name.
VARIABLE_RE = re.compile(
    r"\$\{([A-Za-z0-9_]+)(?:[:.][^}]*)?\}|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]|\$([A-Za-z0-9_]+)")
# A PromQL identifier; recording-rule style names (with a colon) are not exported series.
IDENT_RE = re.compile(r"(?<![A-Za-z0-9_:])[A-Za-z_:][A-Za-z0-9_:]*")
RULE_START_RE = re.compile(r"^\s*-\s*(alert|record)\s*:\s*['\"]?([^'\"#\s]+)", re.M)


class Failures:
    def __init__(self):
        self.items = []

    def add(self, msg):
        self.items.append(msg)

    def __bool__(self):
        return bool(self.items)


def run_promtool(promtool, args, cwd):
    try:
        p = subprocess.run([promtool] + args, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
    except OSError as e:
        return 127, str(e)
    return p.returncode, p.stdout


def indent(text):
    return "\n".join("    " + line for line in text.rstrip().splitlines())


# ----------------------------------------------------------------------------- (a), (b)

def check_rules_file(promtool, root, fails):
    rc, out = run_promtool(promtool, ["check", "rules", RULES], root)
    if rc != 0:
        fails.add(f"{RULES}: promtool check rules failed:\n{indent(out)}")
        return None
    m = re.search(r"SUCCESS: (\d+) rules found", out)
    return int(m.group(1)) if m else None


def test_rules_file(promtool, root, fails):
    rc, out = run_promtool(promtool, ["test", "rules", RULES_TEST], root)
    if rc != 0:
        alerts = sorted(set(re.findall(r"alertname: ([A-Za-z0-9_]+), time: ([^,\s]+)", out)))
        named = ", ".join(f"{a} at {t}" for a, t in alerts)
        fails.add(f"{RULES_TEST}: promtool test rules failed"
                  + (f" ({named})" if named else "") + f":\n{indent(out)}")
        return False
    return True


# ----------------------------------------------------------------------------- (c)

def walk_panels(panels, path=()):
    """Yields (title path, panel) for every panel, the panels of rows included."""
    for p in panels or []:
        title = p.get("title") or f"(untitled {p.get('type', 'panel')} id {p.get('id')})"
        yield path + (title,), p
        yield from walk_panels(p.get("panels"), path + (title,))


def dashboard_panels(dash):
    yield from walk_panels(dash.get("panels"))
    for row in dash.get("rows") or []:  # pre-schema-16 dashboards
        yield from walk_panels(row.get("panels"), (row.get("title") or "(row)",))


def panel_name(path):
    return " / ".join(f'"{t}"' for t in path)


def template_values(dash):
    values = dict(BUILTIN_VARIABLES)
    for v in (dash.get("templating") or {}).get("list") or []:
        name = v.get("name")
        if not name:
            continue
        kind = v.get("type")
        value = None
        if kind == "datasource":
            value = "prometheus"
        elif v.get("includeAll"):
            value = v.get("allValue") or ".*"
        elif kind in ("custom", "interval", "constant", "textbox"):
            opts = [o.get("value") for o in v.get("options") or [] if o.get("value")]
            query = v.get("query") if isinstance(v.get("query"), str) else ""
            first = query.split(",")[0].strip() if query else ""
            value = opts[0] if opts else first
        if not value:
            cur = (v.get("current") or {}).get("value")
            if isinstance(cur, list):
                cur = cur[0] if cur else None
            value = cur if cur and cur != "$__all" else ".*"
        values[name] = str(value)
    return values


def substitute(expr, values):
    """expr with every variable replaced; and the names of the variables it does not define."""
    unknown = []

    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in values:
            return values[name]
        unknown.append(name)
        return m.group(0)

    return VARIABLE_RE.sub(repl, expr), unknown


def datasource_uses_variable(ds):
    if ds is None or isinstance(ds, str) and ds.startswith("$"):
        return True
    if isinstance(ds, dict):
        uid = ds.get("uid")
        return uid is None or str(uid).startswith("$") or uid in ("-- Mixed --", "-- Dashboard --")
    return False


def dashboard_targets(dash, file, fails, check_datasource):
    """[(where, expr)] of every panel target; records empty exprs and fixed data sources."""
    items = []
    for path, p in dashboard_panels(dash):
        if p.get("type") == "row":
            continue
        if check_datasource and not datasource_uses_variable(p.get("datasource")):
            fails.add(f"{file}: panel {panel_name(path)}: data source {json.dumps(p.get('datasource'))}"
                      " is not the dashboard's data source variable")
        for i, t in enumerate(p.get("targets") or []):
            where = f"panel {panel_name(path)} (target {t.get('refId') or i})"
            if check_datasource and not datasource_uses_variable(t.get("datasource")):
                fails.add(f"{file}: {where}: data source {json.dumps(t.get('datasource'))}"
                          " is not the dashboard's data source variable")
            expr = t.get("expr")
            if expr is None:
                continue  # not a Prometheus query
            if not expr.strip():
                fails.add(f"{file}: {where}: empty expression")
                continue
            items.append((where, expr))
    return items


def check_exprs_parse(promtool, file, items, values, fails):
    """Writes each expression as a recording rule and has promtool check the file."""
    rules = []
    index = {}
    for where, expr in items:
        text, unknown = substitute(expr, values)
        if unknown:
            fails.add(f"{file}: {where}: uses template variable(s) the dashboard does not define: "
                      + ", ".join("$" + u for u in sorted(set(unknown))))
            continue
        n = len(rules)
        index[n] = (where, expr, text)
        rules.append({"record": f"wtx_check:expr{n}", "expr": text})
    if not rules:
        return 0
    with tempfile.TemporaryDirectory(prefix="wtx-check-exprs-") as tmp:
        path = os.path.join(tmp, "dashboard-exprs.rules.yml")
        with open(path, "w", encoding="utf-8") as f:  # JSON is YAML
            json.dump({"groups": [{"name": "wtx_check", "rules": rules}]}, f, indent=1)
        rc, out = run_promtool(promtool, ["check", "rules", path], tmp)
    if rc == 0:
        return len(rules)
    attributed = False
    for line in out.splitlines():
        m = re.search(r'"wtx_check:expr(\d+)":\s*(.*)', line)
        if m and int(m.group(1)) in index:
            where, expr, text = index[int(m.group(1))]
            fails.add(f"{file}: {where}: {m.group(2)}\n    expr: {expr}"
                      + (f"\n    as checked: {text}" if text != expr else ""))
            attributed = True
    if not attributed:
        fails.add(f"{file}: promtool check rules of its expressions failed:\n{indent(out)}")
    return len(rules)


# ----------------------------------------------------------------------------- (d)

def metric_names(text):
    return {t for t in IDENT_RE.findall(text) if t.startswith("wtx_") and ":" not in t}


def is_known(name, known):
    if name in known:
        return True
    return any(name.endswith(s) and name[:-len(s)] in known for s in HISTOGRAM_SUFFIXES)


def known_metrics(root, metrics_arg, fails):
    """(names, where they come from), or (None, None) after recording a failure."""
    doc = os.path.join(root, METRICS_DOC)
    if os.path.exists(doc):
        names = set()
        with open(doc, encoding="utf-8") as f:
            for line in f:
                if line.lstrip().startswith("|"):
                    names |= metric_names(line)
        if not names:
            fails.add(f"{METRICS_DOC}: its table lists no wtx_ metric name")
            return None, None
        return names, METRICS_DOC
    if metrics_arg:
        names = {n.strip() for n in metrics_arg.split(",") if n.strip()}
        return names, "--metrics"
    fails.add(f"{METRICS_DOC} does not exist and no --metrics list was given: "
              "cannot check the metric names")
    return None, None


def strip_yaml_comments(text):
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def rules_segments(text):
    """[(kind, name, text)] of each rule of a rules file (its expr, labels and annotations)."""
    text = strip_yaml_comments(text)
    starts = list(RULE_START_RE.finditer(text))
    out = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
        out.append((m.group(1), m.group(2), text[m.start():end]))
    return out


def check_rule_names(root, rules_file, known, source, fails):
    with open(os.path.join(root, rules_file), encoding="utf-8") as f:
        segments = rules_segments(f.read())
    used = set()
    for kind, name, seg in segments:
        names = metric_names(seg)
        used |= names
        for n in sorted(names):
            if not is_known(n, known):
                fails.add(f"{rules_file}: {kind} {name}: unknown metric {n} (not in {source})")
    return used


def check_dashboard(promtool, root, known, source, fails, dashboard=DASHBOARD):
    """(c) and (d) for the dashboard; returns (exprs checked, panels, metric names used)."""
    path = os.path.join(root, dashboard)
    try:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        fails.add(f"{dashboard}: cannot be read as JSON: {e}")
        return 0, 0, set()
    values = template_values(dash)
    has_ds_var = any(v.get("type") == "datasource"
                     for v in (dash.get("templating") or {}).get("list") or [])
    if not has_ds_var:
        fails.add(f"{dashboard}: no data source template variable (type datasource)")
    items = dashboard_targets(dash, dashboard, fails, has_ds_var)
    if not items:
        fails.add(f"{dashboard}: no panel has a Prometheus target expression")
    n = check_exprs_parse(promtool, dashboard, items, values, fails)
    used = set()
    if known is not None:
        for where, expr in items:
            names = metric_names(expr)
            used |= names
            for name in sorted(names):
                if not is_known(name, known):
                    fails.add(f"{dashboard}: {where}: unknown metric {name} (not in {source})")
        for v in (dash.get("templating") or {}).get("list") or []:
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else (q or "")
            for name in sorted(metric_names(q) | metric_names(v.get("definition") or "")):
                used.add(name)
                if not is_known(name, known):
                    fails.add(f"{dashboard}: template variable ${v.get('name')}: unknown metric "
                              f"{name} (not in {source})")
    panels = sum(1 for _, p in dashboard_panels(dash) if p.get("type") != "row")
    return n, panels, used


# ----------------------------------------------------------------------------- modes

def promtool_usable(promtool):
    if not promtool or not (os.path.isfile(promtool) and os.access(promtool, os.X_OK)) \
            and not shutil.which(promtool):
        return False
    rc, _ = run_promtool(promtool, ["--version"], None)
    return rc == 0


def cmd_check(promtool, root, metrics_arg, out=sys.stdout):
    root = os.path.abspath(root)
    fails = Failures()
    n_rules = check_rules_file(promtool, root, fails)
    if n_rules is not None:
        print(f"check_deploy: promtool check rules {RULES}: {n_rules} rules", file=out)
    if test_rules_file(promtool, root, fails):
        print(f"check_deploy: promtool test rules {RULES_TEST}: SUCCESS", file=out)
    known, source = known_metrics(root, metrics_arg, fails)
    used = set()
    if known is not None and os.path.exists(os.path.join(root, RULES)):
        used |= check_rule_names(root, RULES, known, source, fails)
    n_exprs, n_panels, dash_used = check_dashboard(promtool, root, known, source, fails)
    used |= dash_used
    print(f"check_deploy: {DASHBOARD}: {n_exprs} expressions of {n_panels} panels checked "
          "with promtool", file=out)
    if known is not None:
        print(f"check_deploy: {len(used)} metric names used by the rules and the dashboard, "
              f"checked against {source}: {', '.join(sorted(used))}", file=out)
    if fails:
        for f in fails.items:
            print(f"check_deploy: FAILED: {f}", file=out)
        print(f"check_deploy: {len(fails.items)} failure(s)", file=out)
        return 1
    print("check_deploy: OK", file=out)
    return 0


def _self_test_dashboard(broken):
    ds = {"type": "prometheus", "uid": "${datasource}"}

    def p(pid, title, expr, ptype="timeseries"):
        return {"id": pid, "type": ptype, "title": title, "datasource": ds,
                "gridPos": {"x": 0, "y": pid, "w": 12, "h": 8},
                "targets": [{"refId": "A", "datasource": ds, "expr": expr}]}

    nested = [p(3, "Fine phase quantiles",
                'histogram_quantile(0.99, sum by (phase, le) (rate('
                'wtx_phase_duration_seconds_bucket{fleet=~"${fleet}", replica=~"$replica"}'
                '[$__rate_interval])))')]
    top = [p(1, "Fine bytes", 'sum(rate(wtx_bytes_written_total{fleet=~"$fleet"}[$__rate_interval]))')]
    if broken:
        nested.append(p(4, "Planted syntax error",
                        'sum by (rank) (rate(wtx_bytes_written_total{fleet=~"$fleet"}[$__rate_interval])'))
        top.append(p(5, "Planted unknown metric", 'rate(wtx_bogus_total{replica=~"$replica"}[$__interval])'))
    panels = top + [{"id": 2, "type": "row", "title": "Collapsed row", "collapsed": True,
                     "gridPos": {"x": 0, "y": 20, "w": 24, "h": 1}, "panels": nested}]
    var = {"datasource": ds, "includeAll": True, "allValue": ".*", "multi": True}
    return {"schemaVersion": 38, "title": "self-test", "panels": panels,
            "templating": {"list": [
                {"type": "datasource", "name": "datasource", "query": "prometheus"},
                dict(var, type="query", name="fleet", query="label_values(wtx_serving, fleet)"),
                dict(var, type="query", name="replica",
                     query='label_values(wtx_serving{fleet=~"$fleet"}, replica)')]}}


PLANTED_RULES = """groups:
  - name: planted
    rules:
      - alert: PlantedUnknownMetric
        expr: wtx_serving == 0 and on() wtx_made_up_gauge > 0
        annotations:
          summary: planted
"""


def cmd_self_test(promtool):
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    metrics = ",".join(SELF_TEST_METRICS)
    problems = []
    with tempfile.TemporaryDirectory(prefix="wtx-check-deploy-self-test-") as tmp:
        def tree(name, broken, with_doc, planted_rules=False):
            root = os.path.join(tmp, name)
            for rel in (RULES, RULES_TEST):
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                shutil.copyfile(os.path.join(repo, rel), os.path.join(root, rel))
            if planted_rules:
                with open(os.path.join(root, RULES), "a", encoding="utf-8") as f:
                    f.write(PLANTED_RULES.split("rules:\n", 1)[1])
            os.makedirs(os.path.join(root, os.path.dirname(DASHBOARD)), exist_ok=True)
            with open(os.path.join(root, DASHBOARD), "w", encoding="utf-8") as f:
                json.dump(_self_test_dashboard(broken), f, indent=2)
            if with_doc:
                os.makedirs(os.path.join(root, "docs"), exist_ok=True)
                with open(os.path.join(root, METRICS_DOC), "w", encoding="utf-8") as f:
                    f.write("# Metrics\n\n| name | type |\n|---|---|\n")
                    f.writelines(f"| `{m}` | x |\n" for m in SELF_TEST_METRICS)
            return root

        def run(root, metrics_arg):
            import io
            buf = io.StringIO()
            rc = cmd_check(promtool, root, metrics_arg, out=buf)
            return rc, buf.getvalue()

        # A clean tree passes, with the names from docs/observability.md and from --metrics.
        for with_doc in (True, False):
            rc, out = run(tree(f"clean-doc{int(with_doc)}", False, with_doc),
                          None if with_doc else metrics)
            if rc != 0:
                problems.append(f"the clean tree (docs/observability.md: {with_doc}) fails:\n{indent(out)}")

        # The broken dashboard: both planted panels named, with what is wrong; the fine ones not.
        rc, out = run(tree("broken-dashboard", True, False), metrics)
        failed = [l for l in out.splitlines() if "FAILED:" in l]
        expect = [
            ('"Collapsed row" / "Planted syntax error"', "parse error"),
            ('"Planted unknown metric"', "unknown metric wtx_bogus_total"),
        ]
        if rc != 1:
            problems.append(f"the broken dashboard exits {rc}, not 1")
        for panel, what in expect:
            if not any(panel in l and what in l and DASHBOARD in l for l in failed):
                problems.append(f"the broken dashboard's panel {panel} is not reported with "
                                f"'{what}':\n{indent(out)}")
        if any("Fine" in l for l in failed) or len(failed) != len(expect):
            problems.append(f"the broken dashboard reports other failures than the planted ones:\n"
                            f"{indent(out)}")

        # A planted alert with an unknown metric: named with the rules file and the alert.
        rc, out = run(tree("planted-rule", False, True, planted_rules=True), None)
        failed = [l for l in out.splitlines() if "FAILED:" in l]
        want = f"{RULES}: alert PlantedUnknownMetric: unknown metric wtx_made_up_gauge"
        if rc != 1 or len(failed) != 1 or want not in failed[0]:
            problems.append(f"the planted alert is not reported as '{want}' (alone):\n{indent(out)}")

        # An unusable metric list fails rather than passing unchecked.
        rc, out = run(tree("no-names", False, False), None)
        if rc != 1 or "no --metrics" not in out:
            problems.append(f"a tree without docs/observability.md or --metrics does not fail:\n{indent(out)}")

    for p in problems:
        print("check_deploy self-test: FAILED:", p)
    if problems:
        return 1
    print("check_deploy self-test: a clean tree passes (names from docs/observability.md and from "
          "--metrics); the planted syntax error (collapsed row), unknown dashboard metric and "
          "unknown rule metric are each named; a missing name list fails")
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", choices=("check", "self-test"), default="check")
    ap.add_argument("--promtool", required=True, help="path of promtool")
    ap.add_argument("--root", help="repository root (check mode)")
    ap.add_argument("--metrics", help="comma-separated metric names, when there is no "
                                      "docs/observability.md")
    args = ap.parse_args(argv[1:])
    if not promtool_usable(args.promtool):
        print(f"check_deploy: SKIPPED: cannot run promtool ({args.promtool})")
        return 77
    if args.mode == "self-test":
        return cmd_self_test(args.promtool)
    if not args.root:
        ap.error("check needs --root REPO_ROOT")
    return cmd_check(args.promtool, args.root, args.metrics)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
