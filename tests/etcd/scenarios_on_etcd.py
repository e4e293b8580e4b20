#!/usr/bin/env python3
"""The conformance scenarios, unchanged, on the etcd decision log (issue 27): every
SCENARIO.json of the given folders runs as `wtx sim SCENARIO --transport tcp --decision-log
etcd://.../PREFIX --expect SCENARIO.expect.json` against a real 3-member etcd cluster
(tests/etcd/etcd_cluster.py). Exits 77 (reported by CTest as skipped) where no etcd binary is
installed, 1 when a scenario fails (naming it, with the end of its stderr).

usage: scenarios_on_etcd.py WTX_BINARY DIR [DIR...]
"""

import glob
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from etcd_cluster import EtcdCluster, etcd_available  # noqa: E402


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    if not etcd_available():
        print("etcd binary absent (/usr/bin/etcd or etcd on PATH): skipped", file=sys.stderr)
        return 77
    wtx, dirs = argv[1], argv[2:]
    scenarios = sorted(s for d in dirs for s in glob.glob(os.path.join(d, "*.json"))
                       if not s.endswith(".expect.json") and os.path.exists(s[:-5] + ".expect.json"))
    if not scenarios:
        print("no scenarios with expectations in %s" % dirs, file=sys.stderr)
        return 2
    failed = []
    with EtcdCluster() as cluster:
        url = cluster.url("wtx-conformance")
        for s in scenarios:
            r = subprocess.run([wtx, "sim", s, "--transport", "tcp", "--decision-log", url,
                                "--expect", s[:-5] + ".expect.json"],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                failed.append(s)
                print("FAILED %s (exit %d)\n%s" % (s, r.returncode, r.stderr[-3000:]))
    print("%d scenarios on etcd, %d failed" % (len(scenarios), len(failed)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
