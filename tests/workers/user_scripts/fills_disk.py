"""A hostile script: it fills its directories, 1 MiB files into /tmp (``big``) or empty files into its scratch
directory (``empty``: inodes), far past a small disk limit, and says so if it ever gets to the end."""
import os
import sys
import time

mode = sys.argv[1]
for n in range(400 if mode == "big" else 100_000):
    if mode == "big":
        with open(f"/tmp/fill-{n}", "wb") as f:
            f.write(os.urandom(1 << 20))
        time.sleep(0.02)  # 50 MiB/s at most, so that a failing test does not fill the test machine's disk
    else:
        open(os.path.join(os.environ["HOME"], f"e{n}"), "w").close()
        if n % 1000 == 999:
            time.sleep(0.02)
    if n % 50 == 0:
        print("files", n + 1, flush=True)
print("wrote them all")
