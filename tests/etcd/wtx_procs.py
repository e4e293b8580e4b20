"""Process helpers for the etcd failover tests and tools/bench/failover_bench.py.

`wtx coordinator` and `wtx rank` run as real processes (the binary: $WTX_BIN, default
/work/main/build/bin/wtx, which must be the build tree's: crash points need --test-hooks), each
with its stderr in a file of the run's folder (quoted by the failing assertions), driven by
`wtx control` calls (one process per call: docs/protocol.md, "Control protocol").

    run = Run(tmpdir)                                 # secret, manifest, journals under tmpdir
    a = run.coordinator("a", port_a, url, ranks=2)    # waits for its ready line
    b = run.coordinator("b", port_b, url, ranks=2, standby=True, wait_ready=False)
    r0 = run.rank(0, [port_a, port_b], url)
    run.full_tx(a, [r0, r1], "t1", seed=1)            # begin, write '*', refresh '*' per rank
    answer = a.call("commit", {"tx": "t1"})
"""

import errno
import json
import os
import select
import signal
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WTX_BIN = os.environ.get("WTX_BIN", "/work/main/build/bin/wtx")
MANIFEST = os.path.join(REPO, "tests", "conformance", "models", "tiny-manifest.json")
KERNEL_IDENTITY = "flashinfer-mla/bf16"  # as tests/scenarios/crash-coordinator-*.json


def _retry_exec(start, what, wait=60.0):
    """start() again while the binary is missing or being replaced (a rebuild in progress:
    ENOENT, EACCES, ETXTBSY), for up to `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return start()
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EACCES, errno.ETXTBSY) or \
                    time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    ports = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


def begin_req(tx, kind="full", rollback=False):
    return {"req": {"tx": tx, "kind": kind, "base": "", "modules": [], "sources": [],
                    "rollback": rollback}}


class Proc:
    """One wtx daemon: its Popen, ready line, stderr file and control address."""

    def __init__(self, run, name, args, stderr_path):
        self.run = run
        self.name = name
        self.args = args
        self.stderr_path = stderr_path
        self.ready = None
        self.port = None  # control port (coordinator: its --listen port)
        self._stdout_buf = b""
        self._err = open(stderr_path, "ab")
        self.popen = _retry_exec(lambda: subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._err), args[0])

    # -- lifecycle ---------------------------------------------------------------------------

    def wait_ready(self, timeout):
        """Reads the ready line (JSON); raises with the stderr tail when none comes in time."""
        deadline = time.monotonic() + timeout
        fd = self.popen.stdout.fileno()
        while b"\n" not in self._stdout_buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("%s: no ready line within %.1f s\n%s" %
                                     (self.name, timeout, self.stderr_tail()))
            r, _, _ = select.select([fd], [], [], min(left, 0.2))
            if r:
                chunk = os.read(fd, 65536)
                if not chunk:
                    self.popen.wait(timeout=5)
                    raise AssertionError("%s exited (status %s) before its ready line\n%s" %
                                         (self.name, self.popen.returncode, self.stderr_tail()))
                self._stdout_buf += chunk
        line, self._stdout_buf = self._stdout_buf.split(b"\n", 1)
        self.ready = json.loads(line)
        assert self.ready.get("ready") is True, "%s: %s\n%s" % (self.name, line,
                                                                self.stderr_tail())
        self.port = self.ready.get("control_port", self.ready.get("port"))
        return self.ready

    def has_ready_line(self):
        """Non-blocking: True once the ready line arrived (and parses it)."""
        if self.ready is not None:
            return True
        fd = self.popen.stdout.fileno()
        r, _, _ = select.select([fd], [], [], 0)
        if r:
            chunk = os.read(fd, 65536)
            self._stdout_buf += chunk
        if b"\n" in self._stdout_buf:
            self.wait_ready(1)
            return True
        return False

    def alive(self):
        return self.popen.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait()

    def signal(self, sig):
        os.kill(self.popen.pid, sig)

    def wait_exit(self, timeout):
        """The exit status, or None when still running after `timeout`."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stderr_text(self):
        try:
            with open(self.stderr_path, "r", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stderr_tail(self, lines=25):
        text = self.stderr_text().splitlines()
        return "--- %s stderr (%s) ---\n%s" % (self.name, self.stderr_path,
                                               "\n".join(text[-lines:]))

    def close(self):
        if self.popen.poll() is None:
            try:
                os.kill(self.popen.pid, signal.SIGCONT)
            except OSError:
                pass
            self.kill(signal.SIGKILL)
        if self.popen.stdout:
            self.popen.stdout.close()
        self._err.close()

    # -- control -----------------------------------------------------------------------------

    def call(self, method, params=None, timeout=30.0):
        """One control call: (exit status of `wtx control`, parsed answer or None)."""
        return self.run.control(self.port, method, params, timeout)

    def ok(self, method, params=None, timeout=30.0):
        rc, answer = self.call(method, params, timeout)
        assert rc == 0, "%s %s %s -> exit %d: %s\n%s" % (self.name, method, params, rc, answer,
                                                         self.stderr_tail())
        return answer


class Run:
    """A test's processes: secret, manifest copy and journals in `workdir`."""

    def __init__(self, workdir, binary=WTX_BIN):
        self.dir = str(workdir)
        self.bin = binary
        os.makedirs(self.dir, exist_ok=True)
        self.secret = os.path.join(self.dir, "secret")
        fd = os.open(self.secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        self.procs = []

    def close(self):
        for p in self.procs:
            p.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def stderr_tails(self):
        return "\n".join(p.stderr_tail() for p in self.procs)

    # -- daemons -----------------------------------------------------------------------------

    def coordinator(self, name, port, decision_log=None, ranks=2, standby=False,
                    lease_ttl_ms=1000, journal=None, wait_ready=True, ready_timeout=15.0,
                    extra=()):
        journal = journal or os.path.join(self.dir, "coordinator-" + name)
        args = [self.bin, "coordinator", "--listen", "127.0.0.1:%d" % port, "--journal", journal,
                "--secret-file", self.secret, "--ranks", str(ranks), "--test-hooks"]
        if decision_log:
            args += ["--decision-log", decision_log, "--lease-ttl-ms", str(lease_ttl_ms)]
            if standby:
                args.append("--standby")
        args += list(extra)
        p = Proc(self, "coordinator-" + name, args,
                 os.path.join(self.dir, "coordinator-%s.%d.stderr" % (name, len(self.procs))))
        p.port = port
        self.procs.append(p)
        if wait_ready:
            p.wait_ready(ready_timeout)
        return p

    def rank(self, r, coordinator_ports, decision_log=None, wait_ready=True, extra=(),
             journal=None):
        args = [self.bin, "rank", "--connect",
                ",".join("127.0.0.1:%d" % port for port in coordinator_ports),
                "--rank", str(r), "--journal", journal or os.path.join(self.dir, "rank-%d" % r),
                "--secret-file", self.secret, "--manifest", MANIFEST,
                "--kernel-identity", KERNEL_IDENTITY, "--control", "127.0.0.1:0",
                "--backoff-max-ms", "100", "--heartbeat-ms", "300", "--test-hooks"]
        if decision_log:
            args += ["--decision-log", decision_log]
        args += list(extra)
        p = Proc(self, "rank-%d" % r, args,
                 os.path.join(self.dir, "rank-%d.%d.stderr" % (r, len(self.procs))))
        self.procs.append(p)
        if wait_ready:
            p.wait_ready(15.0)
        return p

    # -- calls -------------------------------------------------------------------------------

    def control(self, port, method, params=None, timeout=30.0):
        args = [self.bin, "control", "127.0.0.1:%d" % port, method,
                json.dumps(params if params is not None else {}), "--secret-file", self.secret,
                "--timeout-ms", str(int(timeout * 1000))]
        try:
            out = _retry_exec(lambda: subprocess.run(args, stdin=subprocess.DEVNULL,
                                                     capture_output=True, timeout=timeout + 10),
                              args[0])
        except subprocess.TimeoutExpired:
            return 124, None
        answer = None
        text = out.stdout.decode(errors="replace").strip()
        if text:
            try:
                answer = json.loads(text.splitlines()[-1])
            except ValueError:
                answer = {"unparsed": text}
        if answer is None and out.stderr:
            answer = {"stderr": out.stderr.decode(errors="replace").strip()}
        return out.returncode, answer

    def cli(self, *args, timeout=30.0):
        """Runs `wtx ARGS...`: the CompletedProcess (text)."""
        return _retry_exec(lambda: subprocess.run([self.bin] + list(args),
                                                  stdin=subprocess.DEVNULL, capture_output=True,
                                                  text=True, timeout=timeout), self.bin)

    # -- transactions ------------------------------------------------------------------------

    def full_tx(self, coordinator, ranks, tx, seed, rollback=False):
        """Begins a full transaction and writes every parameter (and its derived tensors) on
        every rank, as tests/scenarios/crash-coordinator-after-decision-logged.json does. With
        `rollback` the ranks keep before-images, so that an abort leaves them serving the
        previous version."""
        answer = coordinator.ok("begin", begin_req(tx, rollback=rollback))
        assert status_code(answer) == "OK", "begin %s: %s\n%s" % (tx, answer,
                                                                  coordinator.stderr_tail())
        for r in ranks:
            r.ok("step", {"step": {"op": "write", "param": "*", "fill": {"seed": seed}}})
            r.ok("step", {"step": {"op": "refresh", "derived": "*"}})
        return answer

    def wait_ranks(self, coordinator, n, timeout_ms=15000):
        return coordinator.ok("wait_ranks", {"ranks": list(range(n)), "timeout_ms": timeout_ms},
                              timeout=timeout_ms / 1000 + 10)


def status_code(answer):
    """The code of a control answer's status ('OK' when none)."""
    if not isinstance(answer, dict):
        return None
    st = answer.get("status", answer)
    if isinstance(st, dict):
        return st.get("code", "OK")
    return "OK"


def wait_for(predicate, timeout, interval=0.05):
    """Polls predicate() until it returns a truthy value (returned) or `timeout` passes (the
    last value is returned)."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = predicate()
    return value
