"""The submit form: generated from the workload's parameter schema, inline errors, nothing stored on error."""
import pytest

from zico_workloads.catalog import get_workload
from zico.jobs.models import Event, Job

pytestmark = pytest.mark.django_db


def _valid(personas, **over):
    data = {"tenant": personas.tenant.pk, "workload": "digits-cnn", "name": "my run", "param_batch_size": "32",
            "param_iterations": "40", "param_precision": "fp32", "priority": "0", "budget_gib": "", "action": "submit"}
    data.update(over)
    return data


def test_form_has_one_labelled_field_per_schema_parameter(client_for, personas):
    html = client_for(personas.teammate).get("/jobs/new/?workload=digits-cnn").content.decode()
    for name in get_workload("digits-cnn").param_schema["properties"]:
        assert f'<label for="id_param_{name}">' in html, name
        assert f'id="id_param_{name}"' in html
    assert 'value="64"' in html                     # digits-cnn's default batch size is the initial value


def test_choosing_another_workload_shows_its_parameters(client_for, personas):
    html = client_for(personas.teammate).get("/jobs/new/?workload=tiny-lm").content.decode()
    assert 'id="id_param_seq_len"' in html and 'id="id_param_image_size"' not in html


@pytest.mark.parametrize("field,value,message", [
    ("param_batch_size", "0", "greater than or equal to 1"),
    ("param_batch_size", "lots", "Enter a whole number"),
    ("param_precision", "fp8", "Select a valid choice"),
    ("priority", "500", "less than or equal to 100"),
])
def test_invalid_field_shows_inline_and_stores_nothing(client_for, personas, field, value, message):
    before = (Job.objects.count(), Event.objects.count())
    r = client_for(personas.teammate).post("/jobs/new/", _valid(personas, **{field: value}))
    html = r.content.decode()
    assert r.status_code == 200
    assert f'id="id_{field}_error"' in html and message in html
    assert f'aria-describedby="id_{field}_error' in html and 'aria-invalid="true"' in html
    assert (Job.objects.count(), Event.objects.count()) == before


def test_spec_error_from_submission_lands_on_the_budget_field(client_for, personas, cluster):
    before = Job.objects.count()
    r = client_for(personas.teammate).post("/jobs/new/", _valid(personas, budget_gib="500"))
    html = r.content.decode()
    assert r.status_code == 200 and 'id="id_budget_gib_error"' in html and "exceeds the largest device" in html
    assert Job.objects.count() == before


def test_valid_job_is_stored_and_opens_its_detail_page(client_for, personas):
    r = client_for(personas.teammate).post("/jobs/new/", _valid(personas, budget_gib="1.5"))
    job = Job.objects.get(name="my run")
    assert r.status_code == 302 and r.url == f"/jobs/{job.pk}/"
    assert (job.owner, job.tenant, job.status) == (personas.teammate, personas.tenant, "queued")
    assert job.params["batch_size"] == 32 and job.params["image_size"] == 16   # default filled in
    assert job.budget_bytes == int(1.5 * (1 << 30))


def test_viewer_and_outsider_cannot_submit_to_the_tenant(client_for, personas):
    assert client_for(personas.viewer).get("/jobs/new/").status_code == 403
    r = client_for(personas.outsider).post("/jobs/new/", _valid(personas))   # acme is not among its choices
    assert r.status_code == 200 and "Select a valid choice" in r.content.decode()
    assert not Job.objects.filter(tenant=personas.tenant).exists()


def test_submissions_over_the_rate_limit_are_refused_and_not_stored(client_for, personas, settings):
    settings.RATE_LIMITS = {**settings.RATE_LIMITS, "job_submit_user": "2/m"}
    c = client_for(personas.teammate)
    for attempt in range(3):   # the limit is shared with the API and may already hold earlier counts
        before = Job.objects.count()
        r = c.post("/jobs/new/", _valid(personas, name=f"burst {attempt}"))
        if r.status_code == 429:
            break
        assert r.status_code == 302
    assert r.status_code == 429 and "Too many job submissions" in r.content.decode()
    assert Job.objects.count() == before
