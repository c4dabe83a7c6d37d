"""A hostile script: one fallocate of 8 GiB in its output directory, then 1 MiB writes into /tmp until the disk
refuses; it prints what each got and then waits to be stopped, saying so if it never is."""
import errno
import os
import time

fd = os.open("/job/output/big", os.O_WRONLY | os.O_CREAT, 0o600)
try:
    os.posix_fallocate(fd, 0, 8 << 30)
    print("fallocate: 8 GiB allocated", flush=True)
except OSError as exc:
    print(f"fallocate: {errno.errorcode.get(exc.errno, exc.errno)}", flush=True)
os.ftruncate(fd, 0)  # what a refused fallocate kept, given back
os.close(fd)
os.unlink("/job/output/big")
written = 0
try:
    with open("/tmp/fill", "wb") as f:
        while written < 1 << 30:  # at most 1 GiB, whatever happens
            f.write(b"\xa5" * (1 << 20))
            f.flush()
            written += 1 << 20
            if written % (16 << 20) == 0:
                time.sleep(0.05)  # at most ~300 MiB/s, so that a failing test does not fill the test machine's disk
    print(f"write: {written >> 20} MiB written", flush=True)
except OSError as exc:
    print(f"write: {errno.errorcode.get(exc.errno, exc.errno)} after {written >> 20} MiB", flush=True)
time.sleep(120)
print("not stopped")
