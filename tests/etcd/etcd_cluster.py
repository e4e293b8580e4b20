"""EtcdCluster: a real etcd cluster for process-level tests (the Python twin of etcd_cluster.h).

    from etcd_cluster import EtcdCluster, etcd_available
    if not etcd_available():
        pytest.skip("etcd binary absent")
    with EtcdCluster() as cluster:            # 3 members on free loopback ports
        url = cluster.url("wtx/test")         # etcd://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/wtx/test
        cluster.kill(0)                       # SIGKILL member 0 by pid
        cluster.restart(0)                    # start it again on its data folder and ports

Members run in a fresh temporary folder (removed by stop() and on leaving the `with`), with
short election timeouts (heartbeat 50 ms, election 500 ms). start() waits until the cluster
acknowledges a linearizable write through every member; ports that turn out to be taken are
picked again (3 tries).
"""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request


def etcd_binary():
    """The etcd binary: $WTX_ETCD_BINARY when set (empty or not executable: none), else
    /usr/bin/etcd, else `etcd` on PATH; None when there is none."""
    forced = os.environ.get("WTX_ETCD_BINARY")
    if forced is not None:
        return forced if forced and os.access(forced, os.X_OK) else None
    if os.access("/usr/bin/etcd", os.X_OK):
        return "/usr/bin/etcd"
    return shutil.which("etcd")


def etcd_available():
    return etcd_binary() is not None


def _free_loopback_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _b64(text):
    return base64.b64encode(text.encode()).decode()


class EtcdCluster:
    def __init__(self, members=3, start=True, heartbeat_ms=50, election_ms=500):
        """heartbeat_ms / election_ms: etcd's --heartbeat-interval and --election-timeout
        (etcd's own defaults are 100 and 1000; the tests' 50 / 500 elect faster)."""
        self._heartbeat_ms = heartbeat_ms
        self._election_ms = election_ms
        if not etcd_available():
            raise RuntimeError("no etcd binary (/usr/bin/etcd or PATH)")
        self._size = members
        self._dir = None
        self._procs = []
        self._names = []
        self._client_ports = []
        self._peer_ports = []
        if start:
            self.start()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout=30.0):
        last = None
        for _ in range(3):
            self._dir = tempfile.mkdtemp(prefix="wtx-etcd-")
            ports = set()
            while len(ports) < 2 * self._size:
                ports.add(_free_loopback_port())
            ports = sorted(ports)
            self._names = ["m%d" % i for i in range(self._size)]
            self._client_ports = ports[0::2]
            self._peer_ports = ports[1::2]
            self._procs = [None] * self._size
            self._token = "wtx-test-%d-%s" % (os.getpid(), os.path.basename(self._dir))
            for i in range(self._size):
                self._launch(i)
            try:
                self._wait_ready(range(self._size), timeout)
                return self
            except RuntimeError as e:  # most likely a port taken meanwhile
                last = e
                self.stop()
        raise last

    def stop(self):
        """Kills every member (SIGKILL by pid) and removes the folder. Idempotent."""
        for i in range(len(self._procs)):
            self.kill(i)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __del__(self):
        try:
            self.stop()
        except Exception:
            pass

    # -- members -----------------------------------------------------------------------------

    def size(self):
        return self._size

    def endpoint(self, i):
        return "127.0.0.1:%d" % self._client_ports[i]

    def url(self, prefix):
        return "etcd://%s/%s" % (",".join(self.endpoint(i) for i in range(self._size)), prefix)

    def kill(self, i):
        """SIGKILLs member i and reaps it; no-op when it is not running."""
        proc = self._procs[i]
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        self._procs[i] = None

    def leader(self):
        """The index of the member that leads the raft group (etcdctl endpoint status)."""
        endpoints = ",".join("http://" + self.endpoint(i) for i in range(self._size)
                             if self._procs[i] is not None)
        out = subprocess.run(["etcdctl", "--endpoints=" + endpoints, "endpoint", "status", "-w",
                              "json"], env=dict(os.environ, ETCDCTL_API="3"),
                             capture_output=True, text=True, timeout=20)
        ids = {}
        for member in json.loads(out.stdout or "[]"):
            st = member["Status"]
            ids[member["Endpoint"]] = st
            if st["leader"] == st["header"]["member_id"]:
                for i in range(self._size):
                    if member["Endpoint"] == "http://" + self.endpoint(i):
                        return i
        raise RuntimeError("no etcd leader: %s %s" % (out.stdout, out.stderr))

    def time_to_write(self, skip, timeout=30.0):
        """Seconds until a put succeeds on a member other than `skip` (after killing the raft
        leader: the election plus one write), or None after `timeout`."""
        t0 = time.monotonic()
        others = [i for i in range(self._size) if i != skip and self._procs[i] is not None]
        n = 0
        while time.monotonic() - t0 < timeout:
            i = others[n % len(others)]
            n += 1
            try:
                self._put(i, "wtx-election-probe", str(n), timeout=0.5)
                return time.monotonic() - t0
            except Exception:  # no leader yet (an error answer, or a timeout)
                time.sleep(0.005)
        return None

    def restart(self, i, timeout=30.0):
        """Starts member i again on its data folder and ports; waits until it takes a write."""
        self.kill(i)
        self._launch(i)
        self._wait_ready([i], timeout)

    # -- internals ---------------------------------------------------------------------------

    def _args(self, i):
        loop = lambda port: "http://127.0.0.1:%d" % port
        initial = ",".join("%s=%s" % (n, loop(p)) for n, p in zip(self._names, self._peer_ports))
        name = self._names[i]
        return [etcd_binary(),
                "--name", name,
                "--data-dir", os.path.join(self._dir, name),
                "--listen-client-urls", loop(self._client_ports[i]),
                "--advertise-client-urls", loop(self._client_ports[i]),
                "--listen-peer-urls", loop(self._peer_ports[i]),
                "--initial-advertise-peer-urls", loop(self._peer_ports[i]),
                "--initial-cluster", initial,
                "--initial-cluster-state", "new",
                "--initial-cluster-token", self._token,
                "--heartbeat-interval", str(self._heartbeat_ms),
                "--election-timeout", str(self._election_ms),
                "--logger", "zap",
                "--log-outputs", os.path.join(self._dir, name + ".log")]

    def _launch(self, i):
        self._procs[i] = subprocess.Popen(self._args(i), stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _put(self, i, key, value, timeout=1.0):
        body = json.dumps({"key": _b64(key), "value": _b64(value)}).encode()
        req = urllib.request.Request("http://%s/v3/kv/put" % self.endpoint(i), data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            answer = json.loads(reply.read())
        if "error" in answer:
            raise RuntimeError(answer["error"])

    def _wait_ready(self, members, timeout):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for i in members:
                if self._procs[i] is not None and self._procs[i].poll() is not None:
                    self._procs[i] = None
                    raise RuntimeError("etcd member %s exited during start (see %s)" %
                                       (self._names[i], os.path.join(self._dir or "",
                                                                     self._names[i] + ".log")))
            try:
                for i in members:  # a put is linearizable: it needs a leader and a quorum
                    self._put(i, "wtx-test/ready", self._names[i])
                return
            except (OSError, urllib.error.URLError, ValueError, RuntimeError) as e:
                last = e
                time.sleep(0.1)
        raise RuntimeError("etcd cluster in %s not ready: %s" % (self._dir, last))


def _self_test():
    """Starts a cluster, kills and restarts a member, and checks the folder is gone after."""
    if not etcd_available():
        print("etcd binary absent: test skipped")
        return 77
    with EtcdCluster() as cluster:
        folder = cluster._dir
        assert cluster.url("p").startswith("etcd://127.0.0.1:"), cluster.url("p")
        cluster.kill(0)
        cluster._wait_ready([1, 2], 10)  # the others elect a leader and take writes
        cluster.restart(0)
        cluster._put(0, "wtx-test/after-restart", "1")
    assert not os.path.exists(folder), folder
    print("etcd_cluster.py: ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(_self_test())
