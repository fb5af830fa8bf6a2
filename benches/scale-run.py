"""benches/scale-run.py BINARY SYSFS_ROOT SECONDS [ARGS...]: `rocewatch run` at a 1 s
interval on SYSFS_ROOT with /metrics scraped every second (gzip accepted, as Prometheus
does); after a 3 s warm-up, CPU (% of
one core) and RSS over SECONDS, the slowest scrape, the collector's own duration metric and
the exporters' self-metrics. Used by benches/scale-2000-ports.sh."""
import sys, time, urllib.request, os, subprocess, socket, gzip
binary, root, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
extra = sys.argv[4:]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
env = dict(os.environ, ROCEWATCH_AGENT__JITTER="0s")
p = subprocess.Popen([binary, "run", "--sysfs-root", root, "--interval", "1s",
    "--prometheus-listen", f"127.0.0.1:{port}", "--log-level", "warn"] + extra, env=env)
tick = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
def status(key):
    for l in open(f"/proc/{p.pid}/status"):
        if l.startswith(key):
            return int(l.split()[1]) / 1024
def scrape():
    # As Prometheus asks: gzip accepted (an agent that does not compress answers in text).
    t = time.time()
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
        headers={"Accept-Encoding": "gzip"}), timeout=30)
    b = r.read()
    global sent
    sent = len(b)
    if r.headers.get("Content-Encoding") == "gzip":
        b = gzip.decompress(b)
    return b, time.time() - t
sent = 0
t0 = time.time()
while True:
    try:
        b, _ = scrape(); break
    except Exception:
        if time.time() - t0 > 60: raise
        time.sleep(0.2)
# The steady state includes the QoS view (rdma_qos_setting: 36 series per port), which
# the agent reads at start and every [qos] interval; at 2000 ports the first read takes a
# while. Measure once it is there (or after 90 s without it, said).
t1 = time.time()
while b"rdma_qos_setting" not in b and time.time() - t1 < 90:
    time.sleep(1)
    b, _ = scrape()
qos = "QoS series present" if b"rdma_qos_setting" in b else "no QoS series after 90 s"
print(f"warm-up: {time.time() - t0:.0f}s ({qos})")
time.sleep(3)
c0 = cpu(); t0 = time.time(); n = 0; worst = 0; size = 0; rss = []
while time.time() - t0 < secs:
    b, d = scrape(); n += 1; worst = max(worst, d); size = len(b)
    end = time.time() + max(0, 1 - d)
    while time.time() < end:  # RSS sampled every 0.1 s: mean and highest over the window
        rss.append(status('VmRSS:')); time.sleep(0.1)
dt = time.time() - t0; c1 = cpu()
durs = [l for l in b.decode().splitlines() if (l.startswith("rocewatch_plugin_duration_seconds_") and 'plugin="counters-sysfs"' in l) or l.startswith("rocewatch_exporter_") or l.startswith("rocewatch_plugin_errors")]
series = sum(1 for l in b.splitlines() if l and not l.startswith(b"#"))
print(f"window {dt:.1f}s, {n} scrapes ({size} bytes, {series} series, {sent} sent, slowest {worst*1e3:.0f} ms); CPU {100*(c1-c0)/dt:.1f}% of a core; RSS mean {sum(rss)/len(rss):.1f} MiB, highest {max(rss):.1f} MiB (sampled every 0.1 s), peak since start {status('VmHWM:'):.1f} MiB")
for l in durs: print("  " + l)
p.terminate(); p.wait()
