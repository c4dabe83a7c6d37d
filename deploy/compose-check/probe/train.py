"""A user script for the compose check (scripts/compose-check.sh): first probes its sandbox, then trains a small
MLP like any user's script. The probe looks for the worker's secrets in its environment, tries to reach Redis and
PostgreSQL (by the compose service names and on the loopback) and to write outside /job/output; it prints one
line ``SANDBOX-PROBE <json>`` with what it found, and exits 3 before training if anything got through.
Usage: python train.py [STEPS (default 150)]"""
import json
import os
import socket
import sys

SECRETS = ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "POSTGRES_PASSWORD", "CELERY_BROKER_URL", "ZICO_METRICS_TOKEN")
TARGETS = (("redis", 6379), ("postgres", 5432), ("web", 8000), ("127.0.0.1", 6379), ("127.0.0.1", 5432))
OUTSIDE = ("/job/code/written.txt", "/app/written.txt", "/var/lib/zico/written.txt", "/etc/written.txt",
           "/written.txt", "/usr/written.txt")


def connect(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=3):
            return "connected"
    except OSError as e:
        return f"refused: {type(e).__name__}: {e}"


def write(path: str) -> str:
    try:
        with open(path, "w") as f:
            f.write("x")
        return "written"
    except OSError as e:
        return f"failed: {type(e).__name__}: {e}"


def probe() -> dict:
    found = {k: "present" for k in os.environ if k in SECRETS or "PASSWORD" in k or "SECRET" in k}
    nets = {f"{h}:{p}": connect(h, p) for h, p in TARGETS}
    writes = {p: write(p) for p in OUTSIDE}
    with open("/job/output/probe.json", "w") as f:  # inside the output directory: allowed
        json.dump({"env": found, "connect": nets, "write": writes}, f)
    return {"env": found, "connect": nets, "write": writes, "uid": os.getuid(), "environ": sorted(os.environ)}


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    seen = probe()
    print("SANDBOX-PROBE " + json.dumps(seen, sort_keys=True), flush=True)
    leaks = bool(seen["env"]) or any(v == "connected" for v in seen["connect"].values()) \
        or any(v == "written" for v in seen["write"].values())
    if leaks:
        sys.exit(3)
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(steps):
        x, y = torch.randn(256, 256), torch.randint(0, 10, (256,))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 25 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    print(f"done: {steps} steps", flush=True)


if __name__ == "__main__":
    main()
