"""A hostile script's output: 20 MiB of bare carriage returns (20 million empty lines to a naive reader), then
200,000 lines of text (20 MB) as fast as it can, then it ends normally. ``--mb N``: N MB of text instead of 20.
``--quiet``: one line only (the baseline run of the same harness)."""
import sys

out = sys.stdout.buffer
if "--quiet" not in sys.argv:
    for _ in range(20):
        out.write(b"\r" * (1 << 20))
    line = b"x" * 99 + b"\n"
    mb = int(sys.argv[sys.argv.index("--mb") + 1]) if "--mb" in sys.argv else 20
    for _ in range(10 * mb):
        out.write(line * 1000)
    out.flush()
print("flood done", flush=True)
