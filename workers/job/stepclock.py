"""Iterations of an unmodified PyTorch script, found from torch's own hooks, with the gate at each start.

:class:`StepClock` is installed by the user-script job process (``workers.job.entry``) before the script runs.

Note [Iterations of an unmodified script]
    One optimizer step is one iteration (the start must precede the iteration's allocations, the end is
    where the optimizer steps, found without the training code saying so): torch's global step hooks (``torch.optim.optimizer.register_optimizer_step_pre_hook`` /
    ``_post_hook``) see every ``step()`` of every optimizer, so gradient accumulation (one step after N
    micro-batches) counts one. Where the hooks act:

    * iteration 0 begins (the gate round trip: ``iteration_begin`` -> ``go``) at the first module forward
      after the first optimizer was built (``Optimizer.__init__`` wrapped; a global forward pre-hook that
      removes itself), so the setup before it (data, model) runs ungated and the first forward is gated;
      a script whose model calls no ``nn.Module`` begins it at its first step instead;
    * ``forward`` is marked as the iteration begins (as a catalog loop marks it: the coordinator then holds the
      job at its curve's peak until ``backward``, Note [Progress from memory] in placement.pacing; without it
      the prediction left the peak before the job reached it, and two co-located jobs went over the budget);
    * ``backward`` is marked at the first ``torch.autograd.backward`` of an iteration (what ``loss.backward()``
      calls), ``optimizer`` at the step's pre-hook;
    * the step's post-hook ends the iteration (``iteration_end``) and begins the next one at once (the gate
      round trip happens inside ``step()``), so the next forward is gated; not after the last, when the
      script said how many there are (``zico.set_iterations_total``).

    With several optimizers the first one that steps is the clock (a GAN's two steps per iteration count
    one); when it is garbage collected the next one that steps takes over. A script that builds no
    optimizer and marks no iteration itself (Note [Explicit iterations]) runs ungated and reports no
    iterations. A step skipped by ``GradScaler`` (inf gradients) calls no hook and counts nothing.

Note [Explicit iterations]
    A loop without a torch optimizer says where its iterations are with ``with zico.iteration():``
    (:mod:`zico_job`): entering the block is :meth:`StepClock.block_begin` (the gate round trip, the same
    ``iteration_begin`` -> ``go`` as an optimizer's, so one round trip per iteration), leaving it
    :meth:`StepClock.block_end` (``iteration_end``). A ``with`` block rather than one call per iteration
    (``zico.step()``): the gate must come *before* the iteration's allocations, and a lone end mark would
    leave the first iteration ungated and start each next one before whatever the loop does between its
    iterations (loading the next batch, evaluating, logging), which would count as iteration time.

    The rule with an optimizer, so nothing counts twice: from the first block on, the blocks are the clock.
    Optimizer steps then begin and end nothing (inside a block a step marks its ``optimizer`` phase), and
    the forward hook that begins iteration 0 is dropped. An iteration already open when the first block is
    entered (the step's post-hook begins the next iteration at once, and so does the first forward after an
    optimizer was built) was gated already: the block takes it over as its own, with no second round trip.
    Blocks do not nest (RuntimeError).

A stop (cancel, stale placement) raises :class:`JobStopped`, a ``BaseException``, from inside the hook, so the
script's own ``except Exception`` does not swallow it.
"""
from __future__ import annotations

import contextlib
import threading
import time
import weakref
from typing import Any

from .stopped import RunStopped


class JobStopped(BaseException):
    """The agent stopped the job (``status`` cancelled or aborted); raised into the script."""

    def __init__(self, status: str):
        super().__init__(f"job stopped: {status}")
        self.status = status


class StepClock:
    """The script's iterations. ``control`` is the job's :class:`workers.job.control.Control`; ``za`` the
    allocator binding (for its progress marks); ``total`` the iterations the run takes if known."""

    def __init__(self, control, job_id: int, za, total: int | None = None):
        self.control, self.job_id, self.za, self.total = control, job_id, za, total
        self.iteration = -1  # the current (open or last) iteration's index
        self.after_end = None  # called with the number of iterations done after each one ends
        self.steps = 0  # iterations done
        self.open = False
        self.phase_name = "setup"
        self.delay_s, self.delays = 0.0, 0
        self.first_begin: float | None = None
        self.last_end: float | None = None
        self.busy = 0  # > 0 inside these hooks (or the metric sink): the SIGTERM handler raises only outside
        self._lock = threading.RLock()
        self._clock: weakref.ref | None = None
        self._optimizer_seen = False
        self._forward_hook = None
        self._backward_marked = False
        self._t0 = 0.0
        self._marks: dict[str, float] = {}
        self.stopped: str | None = None
        self.explicit = False  # Note [Explicit iterations]: zico.iteration() blocks are the clock
        self._in_block = False

    def install(self) -> None:
        """Hook torch (imports it). Call once, before the script runs."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(self._pre_step)
        register_optimizer_step_post_hook(self._post_step)
        clock = self
        init, backward = torch.optim.Optimizer.__init__, torch.autograd.backward

        def optimizer_init(opt, *args, **kwargs):
            init(opt, *args, **kwargs)
            clock._optimizer_built()

        def autograd_backward(*args, **kwargs):
            clock._backward()
            return backward(*args, **kwargs)

        torch.optim.Optimizer.__init__ = optimizer_init
        torch.autograd.backward = autograd_backward

    @contextlib.contextmanager
    def working(self):
        """Zico's own code on the script's thread (a hook, a ``zico.log``): a SIGTERM then only requests the
        stop, which the next gate round trip raises, so no message is cut in half."""
        with self._lock:
            self.busy += 1
            try:
                yield
            finally:
                self.busy -= 1

    # -- hooks ------------------------------------------------------------------------------------------
    def _optimizer_built(self) -> None:
        with self.working():
            if self._optimizer_seen:
                return
            self._optimizer_seen = True
            from torch.nn.modules.module import register_module_forward_pre_hook

            self._forward_hook = register_module_forward_pre_hook(self._first_forward)

    def _first_forward(self, module, args) -> None:
        with self.working():
            self._drop_forward_hook()
            if self.iteration < 0 and not self.open and not self.explicit:
                self._guarded(self._begin, 0)

    def _pre_step(self, optimizer, args, kwargs) -> None:
        with self.working():
            if not self._counts(optimizer):
                return
            if self.explicit:  # Note [Explicit iterations]: a step inside a block is a phase of it
                self._mark("optimizer")
                return
            self._drop_forward_hook()
            if not self.open:  # no forward was seen (or the stop path left it closed): begin here
                self._guarded(self._begin, self.steps)
            self._mark("optimizer")

    def _post_step(self, optimizer, args, kwargs) -> None:
        with self.working():
            if not self._counts(optimizer) or not self.open or self.explicit:
                return
            self._end()
            if self.total is None or self.steps < self.total:
                self._guarded(self._begin, self.steps)

    def _backward(self) -> None:
        with self.working():
            if self.open and not self._backward_marked:
                self._backward_marked = True
                self._mark("backward")

    # -- zico.iteration() blocks: Note [Explicit iterations] ------------------------------------------------
    def block_begin(self) -> None:
        """Entering a ``zico.iteration()`` block: begin an iteration (the gate round trip), or take over the one
        the optimizer's hooks began. Raises RuntimeError inside another block, JobStopped when stopped."""
        with self.working():
            if self._in_block:
                raise RuntimeError("zico.iteration(): blocks do not nest (one block is one iteration)")
            self.explicit = True
            self._drop_forward_hook()
            if not self.open:
                self._guarded(self._begin, self.steps)
            self._in_block = True

    def block_end(self) -> None:
        """Leaving a ``zico.iteration()`` block (also by an exception): the iteration ends."""
        with self.working():
            self._in_block = False
            if self.open and not self.stopped:
                self._end()

    # -- the iteration ---------------------------------------------------------------------------------
    def _counts(self, optimizer) -> bool:
        clock = self._clock() if self._clock is not None else None
        if clock is None:
            self._clock = weakref.ref(optimizer)
            return True
        return clock is optimizer

    def _drop_forward_hook(self) -> None:
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None

    def _guarded(self, fn, *args: Any) -> None:
        if self.stopped:
            raise JobStopped(self.stopped)
        try:
            fn(*args)
        except RunStopped as stopped:
            self.stopped = stopped.status
            raise JobStopped(stopped.status) from None

    def _begin(self, i: int) -> None:
        self.phase_name = "wait"
        delay = self.control.begin(i)
        self.delay_s += delay
        self.delays += delay > 0
        now = time.monotonic()
        self.first_begin = self.first_begin if self.first_begin is not None else now
        self.iteration, self.open, self._t0, self._marks = i, True, now, {}
        self._backward_marked = False
        self._allocator_mark("iteration_start", i)
        self._mark("forward")  # the coordinator holds the job at its peak until backward (placement.pacing)

    def _mark(self, kind: str) -> None:
        if not self.open:
            return
        self.phase_name = kind
        self._marks[kind] = round(time.monotonic() - self._t0, 6)
        self.control.send("mark", kind=kind, iteration=self.iteration)
        self._allocator_mark(kind, self.iteration)

    def _end(self) -> None:
        self.open = False
        self.steps += 1
        self.last_end = time.monotonic()
        self.phase_name = "done"
        self.control.send("iteration_end", iteration=self.iteration, marks=self._marks)
        self._allocator_mark("iteration_end", self.iteration)  # the pool hands back what the agent wants
        if self.after_end is not None:  # a profile run counts its iterations here (workers.job.entry)
            self.after_end(self.steps)

    def _allocator_mark(self, kind: str, i: int) -> None:
        try:
            self.za.mark(self.job_id, kind, i)
        except Exception:  # a mark is advice to the pool; never fail a step for it
            pass
