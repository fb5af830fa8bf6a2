"""benches/lib/measure.py: how the benches measure a process, in one place.

The scripts under benches/ import it (`export PYTHONPATH="$top/benches/lib"`, then
`from measure import ...` in their Python): CPU as user plus system seconds from
/proc/PID/stat, RSS as the kernel's VmRSS (now) and VmHWM (the peak since the process
started), a sampler for the mean and highest VmRSS over a window (what the peak alone
does not say: a start-up high that the steady state never reaches again), a free port,
and one /metrics scrape with or without gzip (Prometheus asks for gzip; a plain scrape
is what curl and most harnesses do).
"""
import gzip
import os
import socket
import threading
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    """CPU seconds (user plus system) the process has used since it started."""
    # The command name may hold spaces and parentheses: the fields follow the last ')'.
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def _status_mib(pid, key):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(f"/proc/{pid}/status has no {key}")


def rss(pid):
    """Resident memory now, MiB (VmRSS)."""
    return _status_mib(pid, "VmRSS")


def peak_rss(pid):
    """The highest resident memory since the process started, MiB (VmHWM)."""
    return _status_mib(pid, "VmHWM")


class RssSampler:
    """VmRSS of some processes every `every` seconds on a thread of its own, between
    `start()` and `stop()`: `mean(pid)` and `highest(pid)` over that window."""

    def __init__(self, pids, every=0.1):
        self.pids, self.every = list(pids), every
        self.samples = {p: [] for p in self.pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            for p in self.pids:
                try:
                    self.samples[p].append(rss(p))
                except (OSError, KeyError):
                    pass  # the process ended; what was sampled stands
            self._stop.wait(self.every)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self

    def mean(self, pid):
        s = self.samples[pid]
        return sum(s) / len(s) if s else float("nan")

    def highest(self, pid):
        return max(self.samples[pid], default=float("nan"))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scrape(port, use_gzip=False, timeout=5):
    """One GET of /metrics: (text, bytes sent on the wire). With `use_gzip`, gzip is
    accepted as Prometheus accepts it (and the body decompressed when it came so)."""
    headers = {"Accept-Encoding": "gzip"} if use_gzip else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
        sent = len(body)
        if r.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return body.decode(), sent


def wait_serving(port, proc=None, within=30, what="/metrics"):
    """Until `port` answers /metrics; `proc` (a Popen) that ends first, or `within`
    seconds without an answer, is an error."""
    deadline = time.time() + within
    while True:
        try:
            return scrape(port)
        except Exception as e:
            if time.time() > deadline or (proc is not None and proc.poll() is not None):
                raise RuntimeError(f"{what} on port {port} never answered: {e}") from e
            time.sleep(0.1)
