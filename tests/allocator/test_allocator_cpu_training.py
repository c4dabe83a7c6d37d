"""Real CPU training through the CPU shim: a ResNet and a GPT-2-style model (built from transformers
configs, no weights downloaded) train concurrently in two threads bound to two jobs, all their
tensors served by the one Zico host pool. Each job's peak is reported; with their iterations offset
(each starts its forward when the other enters backward, the Zico time shift) the pool's peak
reserved stays below the sum of the two solo peaks; and both losses fall."""
import threading

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import zico_allocator as za  # noqa: E402

ITERATIONS = 8
RESNET_JOB, GPT_JOB = 101, 102


def make_resnet():
    config = transformers.ResNetConfig(num_channels=3, embedding_size=32, hidden_sizes=[32, 64], depths=[1, 1],
                                       num_labels=4)
    torch.manual_seed(0)
    model = transformers.ResNetForImageClassification(config)
    x, y = torch.randn(32, 3, 64, 64), torch.randint(0, 4, (32,))
    return model, lambda: model(pixel_values=x, labels=y).loss


def make_gpt():
    config = transformers.GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=256, n_positions=128,
                                     bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 256, (8, 128))
    return model, lambda: model(input_ids=ids, labels=ids).loss


class Job:
    """One training job in its own thread: model, optimizer and every tensor charged to job_id."""

    def __init__(self, job_id, factory, turns=None):
        self.job_id, self.factory, self.losses = job_id, factory, []
        self.turns = turns  # (my_turn, their_turn) Events for the offset schedule, or None: solo

    def run(self):
        with za.bind(self.job_id):
            model, loss_fn = self.factory()
            optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
            for it in range(ITERATIONS):
                if self.turns:
                    assert self.turns[0].wait(timeout=120), "the other job never reached its backward"
                    self.turns[0].clear()
                za.mark(self.job_id, "iteration_start", it)
                za.mark(self.job_id, "forward", it)
                loss = loss_fn()
                za.mark(self.job_id, "backward", it)
                if self.turns:
                    self.turns[1].set()  # the other job may start its forward now
                loss.backward()
                za.mark(self.job_id, "optimizer", it)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                self.losses.append(loss.item())
                del loss
                za.mark(self.job_id, "iteration_end", it)
            del model, optimizer, loss_fn
        if self.turns:
            self.turns[1].set()


def run_threads(jobs):
    threads = [threading.Thread(target=j.run) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)


def solo_peak(job):
    za.empty_cache("cpu")
    za.reset_peak_memory_stats("cpu")
    run_threads([job])
    return za.memory_stats(device="cpu")["reserved_bytes.all.peak"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_models_train_concurrently_through_the_shim():
    za.install_cpu(scope="bound")
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        solo = {RESNET_JOB: solo_peak(Job(RESNET_JOB, make_resnet)), GPT_JOB: solo_peak(Job(GPT_JOB, make_gpt))}

        za.empty_cache("cpu")
        za.reset_peak_memory_stats("cpu")
        resnet_turn, gpt_turn = threading.Event(), threading.Event()
        resnet_turn.set()  # the ResNet goes first; the GPT starts when the ResNet enters backward
        jobs = [Job(RESNET_JOB, make_resnet, (resnet_turn, gpt_turn)), Job(GPT_JOB, make_gpt, (gpt_turn, resnet_turn))]
        run_threads(jobs)
    finally:
        torch.set_num_threads(threads_before)
        za.set_cpu_scope("off")  # later tests in this process get torch's own CPU allocator back

    pool = za.memory_stats(device="cpu")
    per_job = {j.job_id: za.memory_stats(job=j.job_id, device="cpu") for j in jobs}
    print(f"solo reserved peaks: {solo}; shared pool reserved peak: {pool['reserved_bytes.all.peak']}")
    for job_id, stats in per_job.items():
        history = za.jobs("cpu")[job_id]["iterations"]
        print(f"job {job_id}: allocated peak {stats['allocated_bytes.all.peak']} B, "
              f"last iteration peak {stats['last_iteration_peak_bytes']} B, iterations {len(history)}")
        assert stats["allocated_bytes.all.peak"] > 1 << 20  # its tensors really went through the pool
        assert stats["allocated_bytes.all.current"] == 0  # everything it allocated came back
        assert stats["iteration"] == ITERATIONS - 1 and len(history) >= ITERATIONS
    assert pool["reserved_bytes.all.peak"] < solo[RESNET_JOB] + solo[GPT_JOB]
    assert all(stats["num_ooms"] == 0 for stats in per_job.values())
    za.check_invariants("cpu")
    for job in jobs:
        assert job.losses[-1] < job.losses[0] * 0.9, (job.job_id, job.losses)


@pytest.mark.timeout(120)
def test_a_refused_cpu_allocation_raises_torch_out_of_memory():
    za.install_cpu(scope="bound")
    za.set_budget_wait(0.0, "cpu")
    za.empty_cache("cpu")  # no cached block may serve the big request
    za.set_budget(za.memory_stats(device="cpu")["reserved_bytes.all.current"] + (32 << 20), "cpu")
    try:
        with za.bind(103):
            small = torch.ones(1000)  # served by the pool
            with pytest.raises(torch.OutOfMemoryError, match="Zico CPU pool"):
                torch.empty(64 << 20, dtype=torch.uint8)
            assert za.last_oom("cpu")["reason"] == "budget" and za.last_oom("cpu")["job"] == 103
            assert float(small.sum()) == 1000.0  # the process and its tensors are fine
            assert za.memory_stats(job=103, device="cpu")["allocated_bytes.all.current"] == 4096
            del small
        assert za.memory_stats(job=103, device="cpu")["allocated_bytes.all.current"] == 0
    finally:
        za.set_budget(None, "cpu")
        za.set_budget_wait(30.0, "cpu")
        za.set_cpu_scope("off")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_real_models_in_lockstep_progress_under_a_tight_budget():
    """Deadlock rule with real tensors: two GPT-2-style jobs start every iteration together under a
    budget between one job's solo peak and the sum of both; neither fails, both finish."""
    za.install_cpu(scope="bound")
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        solo = solo_peak(Job(GPT_JOB, make_gpt))
        budget = solo + solo // 2
        za.empty_cache("cpu")
        za.reset_peak_memory_stats("cpu")
        za.set_budget(budget, "cpu")
        za.set_budget_wait(60.0, "cpu")
        start = threading.Barrier(2, timeout=120)

        class LockstepJob(Job):
            def run(self):
                self.turns = None
                with za.bind(self.job_id):
                    model, loss_fn = self.factory()
                    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
                    for it in range(4):
                        start.wait()
                        za.mark(self.job_id, "iteration_start", it)
                        loss = loss_fn()
                        za.mark(self.job_id, "backward", it)
                        loss.backward()
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                        self.losses.append(loss.item())
                        del loss
                        za.mark(self.job_id, "iteration_end", it)
                    del model, optimizer, loss_fn

        jobs = [LockstepJob(201, make_gpt), LockstepJob(202, make_gpt)]
        run_threads(jobs)
        pool = za.memory_stats(device="cpu")
    finally:
        za.set_budget(None, "cpu")
        za.set_budget_wait(30.0, "cpu")
        torch.set_num_threads(threads_before)
        za.set_cpu_scope("off")
    print(f"solo peak {solo}, budget {budget}, shared peak {pool['reserved_bytes.all.peak']}, "
          f"waits {pool['num_budget_waits']}, overruns {pool['num_budget_overruns']}")
    assert [len(j.losses) for j in jobs] == [4, 4]
    assert all(za.memory_stats(job=j.job_id, device="cpu")["num_ooms"] == 0 for j in jobs)
    assert sum(za.memory_stats(job=j.job_id, device="cpu")["num_budget_waits"] for j in jobs) >= 1
    assert all(j.losses[-1] < j.losses[0] for j in jobs)
