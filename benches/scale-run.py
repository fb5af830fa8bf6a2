"""benches/scale-run.py BINARY SYSFS_ROOT SECONDS [ARGS...]: `rocewatch run` at a 1 s
interval on SYSFS_ROOT with /metrics scraped every second; after a 3 s warm-up, CPU (% of
one core) and RSS over SECONDS, the slowest scrape, the collector's own duration metric and
the exporters' self-metrics. Used by benches/scale-2000-ports.sh."""
import sys, time, urllib.request, os, subprocess, socket
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
    t = time.time()
    b = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
    return b, time.time() - t
t0 = time.time()
while True:
    try:
        b, _ = scrape(); break
    except Exception:
        if time.time() - t0 > 60: raise
        time.sleep(0.2)
time.sleep(3)
c0 = cpu(); t0 = time.time(); n = 0; worst = 0; size = 0
while time.time() - t0 < secs:
    b, d = scrape(); n += 1; worst = max(worst, d); size = len(b)
    time.sleep(max(0, 1 - d))
dt = time.time() - t0; c1 = cpu()
durs = [l for l in b.decode().splitlines() if (l.startswith("rocewatch_plugin_duration_seconds_") and 'plugin="counters-sysfs"' in l) or l.startswith("rocewatch_exporter_") or l.startswith("rocewatch_plugin_errors")]
print(f"window {dt:.1f}s, {n} scrapes ({size} bytes, slowest {worst*1e3:.0f} ms); CPU {100*(c1-c0)/dt:.1f}% of a core; RSS now {status('VmRSS:'):.1f} MiB, peak {status('VmHWM:'):.1f} MiB")
for l in durs: print("  " + l)
p.terminate(); p.wait()
