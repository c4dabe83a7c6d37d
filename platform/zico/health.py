"""The health task: proves a worker consumes its queue and can reach the broker and result backend.

Send it to any queue (``queue="control"`` by default through the route for ``zico.control.*``,
or a device queue explicitly) and read back who answered.
"""
import os
import socket
import time

from celery import shared_task


@shared_task(name="zico.control.health", ignore_result=False)
def health(nonce: str = "") -> dict:
    """Echo ``nonce`` with the answering worker's host, pid and wall-clock time (s since epoch)."""
    return {"ok": True, "nonce": nonce, "host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}
