#!/usr/bin/env python3
"""Runs one command beside a real 3-member etcd cluster (tests/etcd/etcd_cluster.py): every
argument containing @ETCD_URL@ gets the cluster's etcd://HOST:PORT,.../PREFIX url in its place.
Exits with the command's status, or 77 (reported by CTest as skipped) where no etcd binary is
installed.

usage: with_etcd.py PREFIX COMMAND [ARG...]
"""

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
    with EtcdCluster() as cluster:
        url = cluster.url(argv[1])
        return subprocess.run([a.replace("@ETCD_URL@", url) for a in argv[2:]]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
