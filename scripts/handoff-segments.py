#!/usr/bin/env python3
"""Splits a hot lock's hand-offs into the four legs between two processes.

On one hot lock every grant follows the same chain of system calls: the
server writes the grant (W), the client reads it (R), the client writes the
Unlock that releases it (U), the server reads that Unlock (D), the server
writes the next grant. This script reads `perf script` output of the read and
write system calls of both processes and prints each leg's median and mean,
so the distance to a floor can be placed: in the kernel and the wake-up of
the reading goroutine (W to R, U to D) or in either side's own code (R to U,
D to W).

Record about a second of a loaded hot lock (kahuna-bench --workload hot-wait,
or bench/peers' fifo-floor) with

  perf record -q -o perf.data -p SERVER_PID,CLIENT_PID \\
    -e syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_exit_read -- sleep 1
  perf script -i perf.data -F comm,pid,tid,time,event,trace > calls.txt

and name the connections by their file descriptors: `ss -tnp` pairs each
connection's two ends; a kahuna client's LockStream connections are those
whose requests start with byte 0x08 after the 4-byte length, its Batch
connections 0x0a (`strace -e write -xx -p CLIENT_PID` shows them).

  scripts/handoff-segments.py calls.txt SERVER_PID \\
    SERVER_GRANT_FDS CLIENT_GRANT_FDS CLIENT_UNLOCK_FDS SERVER_UNLOCK_FDS

Each FDS argument is a comma-separated list, e.g. 29,30 9,11 5,8 27,28.
perf's own cost slows both processes a little; compare runs traced alike.
"""
import re
import statistics
import sys


def main(argv):
    if len(argv) != 7:
        sys.exit(__doc__)
    path, server_pid = argv[1], argv[2]
    grant_w, grant_r, unlock_w, unlock_r = (
        {int(fd) for fd in a.split(",")} for a in argv[3:7])
    line_re = re.compile(
        r"\s*(\S+)\s+(\d+)/(\d+)\s+([\d.]+):\s+syscalls:(\S+):\s*(.*)")
    fd_re = re.compile(r"fd: (0x[0-9a-f]+)")
    events, reading = [], {}
    with open(path) as f:
        for line in f:
            m = line_re.match(line)
            if not m:
                continue
            _, pid, tid, t, event, rest = m.groups()
            side = "S" if pid == server_pid else "C"
            t = float(t) * 1e6  # µs
            if event == "sys_enter_write":
                events.append((t, side, "w", int(fd_re.search(rest).group(1), 16)))
            elif event == "sys_enter_read":
                reading[tid] = int(fd_re.search(rest).group(1), 16)
            elif event == "sys_exit_read" and tid in reading:
                n = int(rest, 16)
                if 0 < n < 1 << 63:  # not EAGAIN, not the end
                    events.append((t, side, "r", reading[tid]))
    events.sort()
    legs = [
        ("server writes grant -> client reads it", lambda e: e[1] == "C" and e[2] == "r" and e[3] in grant_r),
        ("client reads grant -> writes Unlock", lambda e: e[1] == "C" and e[2] == "w" and e[3] in unlock_w),
        ("client writes Unlock -> server reads it", lambda e: e[1] == "S" and e[2] == "r" and e[3] in unlock_r),
        ("server reads Unlock -> writes next grant", lambda e: e[1] == "S" and e[2] == "w" and e[3] in grant_w),
    ]
    times = [[] for _ in legs]
    cycles = []
    i = next((k for k, e in enumerate(events) if legs[3][1](e)), len(events))
    while i < len(events):
        ts, j = [events[i][0]], i + 1
        for _, is_next in legs:
            while j < len(events) and not is_next(events[j]):
                j += 1
            if j == len(events):
                break
            ts.append(events[j][0])
            j += 1
        if len(ts) < 5:
            break
        for k in range(4):
            times[k].append(ts[k + 1] - ts[k])
        cycles.append(ts[4] - ts[0])
        i = j - 1  # the next grant starts the next chain
    if not cycles:
        sys.exit("no complete hand-off found: check the PIDs and file descriptors")
    for (name, _), ts in zip(legs, times):
        print(f"{name:42s} p50 {statistics.median(ts):6.1f} µs  mean {statistics.mean(ts):6.1f} µs")
    print(f"{'hand-off':42s} p50 {statistics.median(cycles):6.1f} µs  mean {statistics.mean(cycles):6.1f} µs  ({len(cycles)} grants)")


if __name__ == "__main__":
    main(sys.argv)
