"""What the fleet tests share (test_fleet_registry.py, test_fleet_catch_up.py): a real etcd
(tests/etcd/etcd_cluster.py; without the binary the importing test run exits 77, which CTest
reports as skipped), polls bounded for a loaded machine, and a replica out of a status."""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "etcd"))
from etcd_cluster import EtcdCluster, etcd_available  # noqa: E402

if not etcd_available():
    pytest.exit("no etcd binary (/usr/bin/etcd or etcd on PATH): the fleet tests need a real "
                "etcd", returncode=77)

WAIT = 30.0  # the bound of every poll (a loaded 2-core machine); no test asserts a duration


@pytest.fixture(scope="module")
def etcd():
    with EtcdCluster(members=1) as cluster:
        yield cluster


def wait_for(predicate, what):
    """predicate()'s first truthy value, polled up to WAIT seconds (else the test fails)."""
    deadline = time.monotonic() + WAIT
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(0.05)
        value = predicate()
    assert value, what
    return value


def replica_of(status, name):
    """The replica `name` of a fleet status dict, or None."""
    found = [r for r in status["replicas"] if r["replica"] == name]
    return found[0] if found else None
