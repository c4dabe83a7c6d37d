"""Job params can never name code, nor a path outside the configured data directory: attack cases through
the REST API (400 naming the field, nothing stored) and on the worker side (a symlink planted in the data
directory after submission is still refused when the job is built)."""
import os

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from zico_workloads.catalog import ParamsError, validate_params
from zico_workloads.models import build_tiny_lm
from zico.jobs.models import Event, Job


@pytest.fixture
def data_dir(tmp_path):
    """A data directory with one real corpus, a symlink and a symlinked folder that lead outside it."""
    root = tmp_path / "data"
    (root / "corpus").mkdir(parents=True)
    (root / "corpus" / "ok.txt").write_text("hello world " * 200)
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "passwd").write_text("root:x:0:0")
    (root / "corpus" / "out.txt").symlink_to(outside / "passwd")
    (root / "linkdir").symlink_to(outside)
    with override_settings(ZICO_DATA_DIR=root):
        yield root


@pytest.fixture
def owner(personas):
    c = APIClient()
    c.force_login(personas.owner)
    return c


def submit(client, workload="tiny-lm", **params):
    return client.post("/api/jobs/", {"tenant": "acme", "workload": workload, "params": params}, format="json")


ATTACK_PATHS = [
    "/etc/passwd",                       # absolute
    "//etc/passwd",
    "../secret/passwd",                  # parent
    "corpus/../../secret/passwd",
    "corpus/./../../secret/passwd",
    "corpus/out.txt",                    # symlink to a file outside
    "linkdir/passwd",                    # symlinked folder outside
    "corpus/ok.txt\x00.png",             # NUL byte
    "corpus\\..\\..\\secret\\passwd",    # Windows separators
    "os:system",                         # a module:function string is only ever a (missing) file name
    "~/.ssh/id_rsa",                     # no home expansion: a missing relative file
    ".",                                 # the data directory itself is not a file
    "",
]


def test_a_real_corpus_under_the_data_dir_is_accepted(owner, data_dir):
    r = submit(owner, corpus="corpus/ok.txt", iterations=2)
    assert r.status_code == 201, r.content
    assert r.json()["params"]["corpus"] == "corpus/ok.txt"


@pytest.mark.parametrize("corpus", ATTACK_PATHS)
def test_a_corpus_path_out_of_the_data_dir_is_refused_and_nothing_stored(owner, data_dir, corpus):
    jobs, events = Job.objects.count(), Event.objects.count()
    r = submit(owner, corpus=corpus)
    assert r.status_code == 400, r.content
    assert "corpus" in r.json()["params"]
    assert (Job.objects.count(), Event.objects.count()) == (jobs, events)


@pytest.mark.parametrize("workload, params, field", [
    ("os:system", {}, "workload"),
    ("zico_workloads.models:build_tiny_lm", {}, "workload"),  # a builder path is not a catalog key
    ("builtins:eval", {}, "workload"),
    ("tiny-lm", {"builder": "os:system"}, "params"),
    ("tiny-lm", {"__class__": "subprocess:Popen"}, "params"),
    ("tiny-lm", {"optimizer": "torch.optim:LBFGS"}, "params"),
    ("tiny-lm", {"precision": "builtins:exec"}, "params"),
    ("tiny-lm", {"data": "subprocess:run"}, "params"),
    ("digits-cnn", {"corpus": "corpus/ok.txt"}, "params"),  # not a parameter of an image workload
    ("tiny-lm", {"lr": {"$ref": "file:///etc/passwd"}}, "params"),
    ("tiny-lm", {"seq_len": "64; import os"}, "params"),
])
def test_params_cannot_name_code(owner, data_dir, workload, params, field):
    before = Job.objects.count()
    r = submit(owner, workload=workload, **params)
    assert r.status_code == 400 and field in r.json(), r.content
    assert Job.objects.count() == before


def test_an_accepted_job_stores_only_schema_keys_and_never_a_builder(owner, data_dir):
    r = submit(owner, corpus="corpus/ok.txt", iterations=2)
    job = Job.objects.get(pk=r.json()["id"])
    from zico_workloads.catalog import get_workload

    assert set(job.params) <= set(get_workload("tiny-lm").param_schema["properties"])
    assert "builder" not in r.content.decode() and ":build_" not in r.content.decode()


def test_the_worker_refuses_a_symlink_planted_after_submission(data_dir):
    """Submission saw a plain file; someone then swaps it for a link leading out. Building the job refuses."""
    target = data_dir / "corpus" / "later.txt"
    target.write_text("fine " * 100)
    params = validate_params("tiny-lm", {"corpus": "corpus/later.txt", "iterations": 2}, data_dir=data_dir)
    target.unlink()
    os.symlink(data_dir.parent / "secret" / "passwd", target)
    with pytest.raises(ParamsError) as exc:
        build_tiny_lm(params, data_dir)
    assert exc.value.field == "corpus" and "outside the data directory" in exc.value.message
