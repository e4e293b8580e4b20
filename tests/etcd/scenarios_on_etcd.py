#!/usr/bin/env python3
"""The conformance scenarios, unchanged, on the etcd decision log (issue 27): every
SCENARIO.json (with a SCENARIO.expect.json) of the given folders runs as `wtx sim SCENARIO
--transport tcp --decision-log URL --expect SCENARIO.expect.json`. Run beside a real cluster by
tests/etcd/with_etcd.py, which gives URL. Exits 1 when a scenario fails (naming it, with the end
of its stderr).

usage: scenarios_on_etcd.py URL WTX_BINARY DIR [DIR...]
"""

import glob
import os
import subprocess
import sys


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    url, wtx, dirs = argv[1], argv[2], argv[3:]
    scenarios = sorted(s for d in dirs for s in glob.glob(os.path.join(d, "*.json"))
                       if not s.endswith(".expect.json") and os.path.exists(s[:-5] + ".expect.json"))
    if not scenarios:
        print("no scenarios with expectations in %s" % dirs, file=sys.stderr)
        return 2
    failed = []
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
