"""A job that never ends and is never hung: it prints a line every second and sleeps between them (no
iterations), as a job that sleeps inside an iteration would. ``--ignore-term``: it ignores SIGTERM too."""
import signal
import sys
import time

if "--ignore-term" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
n = 0
while True:
    print(f"tick {n}", flush=True)
    n += 1
    time.sleep(1)
