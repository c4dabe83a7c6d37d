"""A helper the hostile scripts of this folder import (the folder is their project, mounted whole): how many threads
the processes of this uid hold, as the process limit counts them."""
import os


def uid_tasks() -> int:
    """Threads of every process of this uid that this PID namespace shows (/proc/<pid>/task)."""
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == os.getuid():
                n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return n
