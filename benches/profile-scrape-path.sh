#!/usr/bin/env bash
# benches/profile-scrape-path.sh [SECONDS] [BINARY]
#
# Where rocewatch's CPU and memory go on the scrape path (issue 53): the agent on the
# generated 16-port tree (integration-tests/fixtures/generate.py --big, counter files kept
# open as on sysfs), collecting every 200 ms and scraped every 200 ms without gzip, as
# benches/scrape-vs-node-exporter.sh runs it; after a 3 s warm-up, `perf record -F 2999
# --call-graph dwarf` of it for SECONDS (default 20), then its CPU by part
# (benches/lib/profile_shares.py). Then its memory from /proc/PID/smaps: anonymous against
# file-backed, the binary's text and read-only data; then, with PAGEOUT=1 (the default),
# what of the binary it needs in its steady state: its file mappings paged out
# (process_madvise MADV_PAGEOUT, from outside: a measurement, the agent is not changed)
# and RSS read again after 10 s of the same load. Needs perf (root, or
# perf_event_paranoid <= 1) and, for the page-out, root. BINARY defaults to
# target/release/rocewatch, built if missing. Results on stdout.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
export PYTHONPATH="$top/benches/lib${PYTHONPATH:+:$PYTHONPATH}"
secs=${1:-20} bin=${2:-target/release/rocewatch}
perf=${PERF:-$(command -v perf || echo /usr/bin/perf)}
[ -x "$perf" ] || { echo "perf not found (PERF=...)" >&2; exit 2; }
[ -x "$bin" ] || cargo build --release --quiet -p rocewatch
bin=$(realpath "$bin")
work=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
root=$(python3 integration-tests/fixtures/generate.py --big "$work/host")
printf '[plugins.builtin.counters-sysfs.options]\nkeep_files_open = "always"\n' > "$work/rocewatch.toml"
port=$(python3 -c 'from measure import free_port; print(free_port())')
ROCEWATCH_AGENT__JITTER=0s "$bin" run --sysfs-root "$root" --interval 200ms \
  --prometheus-listen "127.0.0.1:$port" --log-level warn --config "$work/rocewatch.toml" 2>"$work/stderr" &
pid=$!
python3 -c "from measure import wait_serving; wait_serving($port)" || { cat "$work/stderr" >&2; exit 1; }
python3 - "$pid" "$port" "$secs" "$perf" "$work" "${PAGEOUT:-1}" <<'PY'
import ctypes, os, re, subprocess, sys, threading, time
from measure import cpu, scrape
pid, port, secs, perf, work, pageout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "1"
stop = threading.Event()
def scraper():
    while not stop.is_set():
        s = time.time(); scrape(port); stop.wait(max(0, 0.2 - (time.time() - s)))
threading.Thread(target=scraper, daemon=True).start()
time.sleep(3)
c0 = cpu(pid)
subprocess.run([perf, "record", "-q", "-F", "2999", "--call-graph", "dwarf,16384", "-p", str(pid),
                "-o", f"{work}/perf.data", "--", "sleep", str(secs)], check=True, stderr=subprocess.DEVNULL)
print(f"CPU in the window: {cpu(pid) - c0:.2f} s over {secs:.0f} s (perf's stack copies included)")
with open(f"{work}/perf.txt", "w") as out:
    subprocess.run([perf, "script", "-i", f"{work}/perf.data", "-F", "comm,tid,period,ip,sym,dso"],
                   stdout=out, stderr=subprocess.DEVNULL, check=True)
subprocess.run([sys.executable, os.path.join(os.environ["PYTHONPATH"].split(":")[0], "profile_shares.py"),
                f"{work}/perf.txt"], check=True)
exe = os.path.realpath(f"/proc/{pid}/exe")
def memory():
    """MiB: anonymous, file-backed, the binary's text and its read-only data."""
    m = {"anon": 0, "file": 0, "text": 0, "rodata": 0}
    cur, rss = None, 0
    for line in open(f"/proc/{pid}/smaps"):
        h = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$", line)
        if h:
            cur = h.groups(); continue
        if line.startswith("Rss:"):
            rss = int(line.split()[1]) / 1024
        elif line.startswith("Anonymous:"):  # a private page written (data, heap): not the file's
            anon = int(line.split()[1]) / 1024
            m["anon"] += anon
            m["file"] += rss - anon
            if cur[1] == exe and "w" not in cur[0]:
                m["text" if "x" in cur[0] else "rodata"] += rss - anon
    return m
say = lambda what, m: print(f"{what}: RSS {m['anon'] + m['file']:.1f} MiB: anonymous {m['anon']:.1f}, "
                            f"file-backed {m['file']:.1f} (the binary's text {m['text']:.1f}, read-only data {m['rodata']:.1f})")
say("memory", memory())
if pageout:
    class Iov(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    spans = []
    for line in open(f"/proc/{pid}/maps"):
        f = line.split()
        if len(f) >= 6 and f[5].startswith("/") and "w" not in f[1]:
            a, z = (int(x, 16) for x in f[0].split("-"))
            spans.append(Iov(a, z - a))
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    done = libc.syscall(440, pidfd, (Iov * len(spans))(*spans), len(spans), 21, 0)  # process_madvise, MADV_PAGEOUT
    if done < 0:
        print(f"page-out refused: {os.strerror(ctypes.get_errno())} (needs root)")
    else:
        time.sleep(10)
        say("10 s after its file mappings were paged out (what the steady state touches)", memory())
stop.set()
PY
