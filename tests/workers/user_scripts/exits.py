"""Ends with sys.exit(argv[1]) after leaving a file unclosed and registering an atexit function, as scripts
do; a number is an exit code, anything else a message."""
import atexit
import os
import sys
import threading
import time

out = os.environ["ZICO_OUTPUT_DIR"]
atexit.register(lambda: open(os.path.join(out, "atexit.txt"), "w").write("ran"))
unclosed = open(os.path.join(out, "unclosed.txt"), "w")
unclosed.write("flushed at exit")
threading.Thread(target=lambda: (time.sleep(1), open(os.path.join(out, "thread.txt"), "w").write("joined"))).start()
arg = sys.argv[1]
sys.exit(int(arg) if arg.lstrip("-").isdigit() else arg)
