"""benches/lib/profile_shares.py PERF_SCRIPT_OUTPUT: rocewatch's CPU by what it was doing.

Reads `perf script -F comm,tid,period,ip,sym,dso` of a `perf record --call-graph dwarf`
of the agent and classes each sample by the frames of its stack (the first class whose
marker any frame carries), printing each class's share of the samples, how much of it was
in the kernel, and how much under malloc/free. The classes are the scrape path's parts as
docs/PERFORMANCE.md names them (issue 53); a sample none matches is 'other', its leaf
frames listed so that a new part can be named."""
import collections
import re
import sys

CLASSES = [
    ("quarantine watcher", lambda s: "quarantine" in s),
    ("collector counters-sysfs: pread", lambda s: "SysfsCounters" in s and ("pread" in s or "read_at" in s)),
    ("collector counters-sysfs: the rest", lambda s: "SysfsCounters" in s or "counters_sysfs" in s),
    ("collector counters-ethtool", lambda s: "counters_ethtool" in s or "EthtoolCounters" in s),
    ("other collectors", lambda s: "CollectorPlugin" in s),
    ("rules", lambda s: "::rules" in s),
    ("deriving", lambda s: "derive" in s or "congestion" in s),
    ("store ingest", lambda s: "store" in s and ("ingest" in s or "Store" in s)),
    ("/metrics rendering", lambda s: "prometheus::render" in s or "write_prometheus" in s or "kept" in s),
    ("gzip", lambda s: "flate2" in s or "miniz" in s),
    ("HTTP (hyper, accept, socket)", lambda s: "hyper" in s or "rocewatch_web" in s or "tcp_" in s or "sock" in s),
    ("runtime (tokio, spawn_blocking, scheduling)", lambda s: "tokio" in s or "schedule" in s or "futex" in s or "epoll" in s),
]
ALLOC = re.compile(r"^(malloc|free|cfree|realloc|calloc|_int_malloc|_int_free\w*|_int_realloc|"
                   r"malloc_consolidate|_int_memalign|_mid_memalign|__posix_memalign|__libc_\w*alloc|"
                   r"__libc_free|unlink_chunk\S*|tcache\S*|__rust_\w*alloc\w*)$")
FRAME = re.compile(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def samples(path):
    cur = None
    for line in open(path):
        if not line.strip():
            if cur:
                yield cur
            cur = None
        elif not line[0].isspace():
            cur = []
        elif cur is not None:
            m = FRAME.match(line)
            if m:
                cur.append((m.group(1), m.group(2)))
    if cur:
        yield cur


def main(path):
    shares, kernel, alloc, other = (collections.Counter() for _ in range(4))
    total = 0
    for frames in samples(path):
        names = [n for n, _ in frames]
        joined = " | ".join(names)
        cls = next((c for c, hit in CLASSES if hit(joined)), "other")
        total += 1
        shares[cls] += 1
        if frames and frames[0][1] == "[kernel.kallsyms]":
            kernel[cls] += 1
        for name, dso in frames:  # leaf first: malloc before the first frame of ours
            if ALLOC.match(name):
                alloc[cls] += 1
                break
            if dso != "[kernel.kallsyms]" and not dso.startswith("/usr/lib") and name != "[unknown]":
                break
        if cls == "other":
            other[" < ".join(names[:3])] += 1
    if not total:
        sys.exit(f"{path}: no samples")
    pct = lambda n: f"{100 * n / total:5.1f} %"
    print(f"{total} samples")
    for cls, n in shares.most_common():
        print(f"  {pct(n)}  {cls:46} (in the kernel {pct(kernel[cls])}, under malloc/free {pct(alloc[cls])})")
    print(f"  in the kernel {pct(sum(kernel.values()))}, under malloc/free {pct(sum(alloc.values()))}")
    for stack, n in other.most_common(5):
        print(f"  other: {n} x {stack}")


if __name__ == "__main__":
    main(sys.argv[1])
