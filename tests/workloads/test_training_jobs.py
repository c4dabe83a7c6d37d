"""Training-job tests: real learning on CPU, phase marks, checkpoints, every catalog model runs."""
import pytest
import torch

from zico_workloads.catalog import ParamsError, get_workload
from zico_workloads.training import create_training_job


class RecordingMarks:
    def __init__(self):
        self.events = []

    def iteration_start(self, i):
        self.events.append(("start", i))

    def phase(self, name):
        self.events.append(("phase", name))

    def iteration_end(self, i):
        self.events.append(("end", i))


def test_digits_classifier_reaches_90_percent_training_accuracy_within_default_iterations(tmp_path):
    job = create_training_job("digits-cnn", {}, data_dir=tmp_path)
    assert job.iterations == get_workload("digits-cnn").defaults["iterations"]
    for i in range(job.iterations):
        job.run_iteration(i)
    assert job.metrics()["train_accuracy"] > 0.90
    assert job.evaluate_accuracy() > 0.90


def test_language_model_loss_falls_on_the_shipped_corpus(tmp_path):
    job = create_training_job("tiny-lm", {"iterations": 40}, data_dir=tmp_path)
    losses = [job.run_iteration(i) for i in range(job.iterations)]
    assert (tmp_path / "corpus" / "python-docs.txt").stat().st_size > 100_000
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.75 * first, (first, last)


def test_each_iteration_marks_start_phases_and_end_in_order(tmp_path):
    job = create_training_job("digits-cnn", {"batch_size": 8}, data_dir=tmp_path)
    marks = RecordingMarks()
    job.run_iteration(0, marks)
    job.run_iteration(1, marks)
    one = [("phase", "forward"), ("phase", "backward"), ("phase", "optimizer")]
    assert marks.events == [("start", 0), *one, ("end", 0), ("start", 1), *one, ("end", 1)]


def test_a_checkpoint_resumes_to_the_same_losses(tmp_path):
    params = {"batch_size": 16, "optimizer": "adamw", "lr": 0.01}
    a = create_training_job("digits-cnn", params, data_dir=tmp_path)
    for i in range(3):
        a.run_iteration(i)
    path = tmp_path / "ckpt.pt"
    torch.save(a.state_dict(), path)
    expected = [a.run_iteration(i) for i in range(3, 6)]

    b = create_training_job("digits-cnn", {**params, "seed": 0}, data_dir=tmp_path)
    b.load_state_dict(torch.load(path, weights_only=True))
    assert b.iterations_done == 3
    assert [b.run_iteration(i) for i in range(3, 6)] == pytest.approx(expected, rel=1e-5)

    other = create_training_job("digits-cnn", {**params, "lr": 0.5}, data_dir=tmp_path)
    with pytest.raises(ValueError, match="different workload or params"):
        other.load_state_dict(torch.load(path, weights_only=True))


def test_bf16_autocast_and_synthetic_data_train(tmp_path):
    job = create_training_job("tiny-lm", {"precision": "bf16", "data": "synthetic", "batch_size": 4,
                                          "seq_len": 16}, data_dir=None)
    assert all(torch.isfinite(torch.tensor(job.run_iteration(i))) for i in range(2))


def test_real_text_needs_a_data_directory_and_an_existing_corpus(tmp_path):
    with pytest.raises(ParamsError) as exc:
        create_training_job("tiny-lm", {}, data_dir=None)
    assert exc.value.field == "corpus"
    with pytest.raises(ParamsError, match="no such file"):
        create_training_job("tiny-lm", {"corpus": "corpus/missing.txt"}, data_dir=tmp_path)


@pytest.mark.parametrize("key, params", [
    ("resnet18", {"batch_size": 2, "image_size": 32}),
    ("resnet50", {"batch_size": 2, "image_size": 32}),
    ("bert-base", {"batch_size": 2, "seq_len": 16}),
    ("gpt2-small", {"batch_size": 2, "seq_len": 16}),
])
def test_every_large_catalog_model_runs_an_iteration_at_a_small_size(tmp_path, key, params):
    job = create_training_job(key, {**params, "iterations": 2}, data_dir=tmp_path)
    n_params = sum(p.numel() for p in job.model.parameters())
    expected = {"resnet18": 11.2e6, "resnet50": 23.5e6, "bert-base": 109.5e6, "gpt2-small": 124.4e6}[key]
    assert abs(n_params - expected) / expected < 0.02
    losses = [job.run_iteration(i) for i in range(2)]
    assert all(l == l and l > 0 for l in losses)


def test_building_a_job_is_seeded_and_leaves_the_global_rng_alone(tmp_path):
    torch.manual_seed(1234)
    state = torch.get_rng_state()
    a = create_training_job("digits-cnn", {"seed": 7}, data_dir=tmp_path)
    assert torch.equal(torch.get_rng_state(), state)
    b = create_training_job("digits-cnn", {"seed": 7}, data_dir=tmp_path)
    c = create_training_job("digits-cnn", {"seed": 8}, data_dir=tmp_path)
    wa, wb, wc = (next(j.model.parameters()) for j in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_digits_images_are_scikit_learns_load_digits_read_without_importing_it():
    from sklearn.datasets import load_digits

    from zico_workloads.data import _digits_arrays

    images, target = _digits_arrays()
    d = load_digits()
    assert images.shape == (1797, 8, 8) and images.dtype == d.images.dtype and target.dtype == d.target.dtype
    assert (images == d.images).all() and (target == d.target).all()
