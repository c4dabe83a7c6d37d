"""The one exception that says a run was asked to stop (cancelled or aborted), for both sides of a job: the
agent's gate raises it, the job process (``workers.job.stepclock``) ends on it. Standard
library only, so a sandboxed job process can import it (the sandbox mounts no ``platform/``)."""


class RunStopped(Exception):
    """A cancel or abort arrived while the job waited at the gate; ``status`` says which."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status
