#!/usr/bin/env python3
"""Runs a command and reports how many bytes it read and its peak memory: the kernel's count of
the bytes its read calls returned (rchar of /proc/PID/io), taken once it has exited and before
it is reaped, so that the count is the whole run's, and its peak resident set (ru_maxrss). A
test of *when* a refusal happens (before reading an input, before expanding a description)
counts what was read or held instead of timing it: a count does not move with the machine's
load.

Usage: read_bytes.py OUT TIMEOUT_S COMMAND...  (writes "BYTES_READ PEAK_RSS_KIB" to OUT; exits
with the command's status, 124 when it ran past TIMEOUT_S and was killed)."""
import os
import signal
import sys


def main():
    out, limit, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    timed_out = []

    def on_alarm(*_):
        timed_out.append(True)
        os.kill(pid, signal.SIGKILL)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    while True:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
    signal.setitimer(signal.ITIMER_REAL, 0)
    with open(f"/proc/{pid}/io") as fh:
        io = dict(line.split(": ") for line in fh.read().splitlines() if line)
    _, status, usage = os.wait4(pid, 0)
    with open(out, "w") as fh:
        fh.write("%s %d\n" % (io["rchar"], usage.ru_maxrss))
    return 124 if timed_out else os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
