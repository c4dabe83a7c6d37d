"""Persona tests: owner, teammate and outsider on every page and every JSON endpoint the pages call.

The outsider (owner of tenant "rival") has a job co-located on the same device as acme's job, so the device
timeline is the hard case: the outsider may open it, but acme's job must appear nowhere in it — neither in
the stored bands, nor in live samples read from Redis, nor in the event markers.
"""
import json

import pytest

GIB = 1 << 30

pytestmark = pytest.mark.django_db


def _get(client, url):
    r = client.get(url)
    return r.status_code, r.content.decode()


@pytest.mark.parametrize("path", [
    "/jobs/{job}/", "/data/jobs/{job}/memory.json",
])
def test_outsider_gets_404_for_another_tenants_job(cluster, client_for, personas, path):
    url = path.format(job=cluster.acme_job.pk)
    assert client_for(personas.owner).get(url).status_code == 200
    assert client_for(personas.teammate).get(url).status_code == 200
    status, body = _get(client_for(personas.outsider), url)
    assert status == 404
    assert "acme-secret-model" not in body


def test_outsider_cannot_cancel_another_tenants_job(cluster, client_for, personas):
    assert client_for(personas.outsider).post(f"/jobs/{cluster.acme_job.pk}/cancel/").status_code == 404
    cluster.acme_job.refresh_from_db()
    assert cluster.acme_job.status == "running"


def test_teammate_may_not_cancel_the_owners_job(cluster, client_for, personas):
    assert client_for(personas.teammate).post(f"/jobs/{cluster.acme_job.pk}/cancel/").status_code == 403
    cluster.acme_job.refresh_from_db()
    assert cluster.acme_job.status == "running"


def test_job_list_shows_only_the_users_tenants_jobs(cluster, client_for, personas):
    for user in (personas.owner, personas.teammate):
        _, body = _get(client_for(user), "/")
        assert "acme-secret-model" in body and "rival-secret-model" not in body
    _, body = _get(client_for(personas.outsider), "/")
    assert "rival-secret-model" in body and "acme-secret-model" not in body


def test_jobs_status_json_ignores_ids_of_other_tenants(cluster, client_for, personas):
    ids = f"{cluster.acme_job.pk},{cluster.rival_job.pk}"
    got = client_for(personas.owner).get(f"/data/jobs/status.json?ids={ids}").json()
    assert [j["id"] for j in got["jobs"]] == [cluster.acme_job.pk]
    got = client_for(personas.outsider).get(f"/data/jobs/status.json?ids={ids}").json()
    assert [j["id"] for j in got["jobs"]] == [cluster.rival_job.pk]


def test_job_memory_json_gives_the_owner_stored_and_live_points(cluster, client_for, personas, publish):
    publish(job=cluster.acme_job.pk, device=cluster.key, allocated=11 * GIB, reserved=13 * GIB, iteration=3)
    publish(job=cluster.rival_job.pk, device=cluster.key, allocated=5 * GIB, reserved=6 * GIB, iteration=3)
    url = f"/data/jobs/{cluster.acme_job.pk}/memory.json"
    d = client_for(personas.teammate).get(url, {"window": 300}).json()
    assert d["live"]["ok"] is True
    assert len(d["points"]) == 31                                  # 30 stored seconds + the live sample
    assert d["points"][-1][1:3] == [11 * GIB, 13 * GIB]
    assert d["summary"]["current_reserved_bytes"] == 13 * GIB
    # A 24 h window buckets the stored seconds (144 s each) and keeps each bucket's largest value.
    wide = client_for(personas.teammate).get(url, {"window": 86400}).json()
    assert 1 <= len(wide["points"]) - 1 <= 2 and {p[2] for p in wide["points"][:-1]} == {12 * GIB}


def test_device_timeline_page_is_for_admins_of_tenants_on_the_device(cluster, client_for, personas):
    url = f"/devices/{cluster.device.pk}/"
    assert client_for(personas.owner).get(url).status_code == 200       # acme owner: acme ran there
    assert client_for(personas.staff).get(url).status_code == 200       # cluster staff
    assert client_for(personas.teammate).get(url).status_code == 404    # role member: not an admin
    assert client_for(personas.viewer).get(url).status_code == 404
    assert client_for(personas.owner).get(f"/data/devices/{cluster.device.pk}/timeline.json").status_code == 200
    assert client_for(personas.teammate).get(f"/data/devices/{cluster.device.pk}/timeline.json").status_code == 404


def test_outsider_timeline_of_a_shared_device_hides_the_other_tenants_job(cluster, client_for, personas, publish):
    publish(job=cluster.acme_job.pk, device=cluster.key, allocated=11 * GIB, reserved=13 * GIB)
    publish(job=cluster.rival_job.pk, device=cluster.key, allocated=5 * GIB, reserved=6 * GIB)
    publish(job=None, device=cluster.key, allocated=16 * GIB, reserved=20 * GIB, budget=72 * GIB)
    acme, rival = str(cluster.acme_job.pk), str(cluster.rival_job.pk)

    mine = client_for(personas.outsider).get(f"/data/devices/{cluster.device.pk}/timeline.json").json()
    assert set(mine["series"]) == {rival} and set(mine["jobs"]) == {rival}
    assert mine["series"][rival][-1] == [pytest.approx(mine["series"][rival][-1][0]), 5 * GIB]
    assert all(e["job"] in (None, cluster.rival_job.pk) for e in mine["events"])
    assert "acme-secret-model" not in json.dumps(mine)

    theirs = client_for(personas.owner).get(f"/data/devices/{cluster.device.pk}/timeline.json").json()
    assert set(theirs["series"]) == {acme}
    assert "rival-secret-model" not in json.dumps(theirs)

    everything = client_for(personas.staff).get(f"/data/devices/{cluster.device.pk}/timeline.json",
                                                {"window": 300}).json()
    assert set(everything["series"]) == {acme, rival}
    assert len(everything["series"][acme]) == 31 and everything["pool"][-1][2] == 20 * GIB


def test_device_timeline_poll_returns_only_samples_after_the_cursor(cluster, client_for, personas, publish):
    c = client_for(personas.staff)
    url = f"/data/devices/{cluster.device.pk}/timeline.json"
    first = c.get(url).json()
    publish(job=cluster.acme_job.pk, device=cluster.key, allocated=9 * GIB, reserved=9 * GIB)
    publish(job=cluster.acme_job.pk, device="gpu.other-node.0", allocated=1, reserved=1)  # another device
    nxt = c.get(url, {"cursor": first["live"]["cursor"], "since_event": 10**9}).json()
    assert {k: [p[1] for p in v] for k, v in nxt["series"].items()} == {str(cluster.acme_job.pk): [9 * GIB]}
    again = c.get(url, {"cursor": nxt["live"]["cursor"], "since_event": 10**9}).json()
    assert again["series"] == {} and again["pool"] == []


def test_tenant_page_is_for_members_only(cluster, client_for, personas):
    assert client_for(personas.owner).get("/tenants/acme/").status_code == 200
    assert client_for(personas.teammate).get("/tenants/acme/").status_code == 200
    assert client_for(personas.outsider).get("/tenants/acme/").status_code == 404
    r = client_for(personas.outsider).post("/tenants/acme/members/", {"username": "outsider", "role": "owner"})
    assert r.status_code == 404
    assert personas.tenant.role_of(personas.outsider) is None


def test_json_endpoints_answer_401_when_signed_out(cluster, client):
    for url in (f"/data/jobs/{cluster.acme_job.pk}/memory.json", f"/data/devices/{cluster.device.pk}/timeline.json",
                "/data/jobs/status.json"):
        assert client.get(url).status_code == 401, url


def test_bad_query_parameters_are_named_in_a_400(cluster, client_for, personas):
    c = client_for(personas.owner)
    r = c.get(f"/data/jobs/{cluster.acme_job.pk}/memory.json", {"window": "7"})
    assert r.status_code == 400 and r.json()["detail"].startswith("window:")
    r = c.get(f"/data/jobs/{cluster.acme_job.pk}/memory.json", {"cursor": "x; FLUSHALL"})
    assert r.status_code == 400 and r.json()["detail"].startswith("cursor:")


def test_cluster_overview_names_only_the_users_own_jobs(cluster, client_for, personas):
    _, body = _get(client_for(personas.outsider), "/cluster/")
    assert "rival-secret-model" in body and "acme-secret-model" not in body
    assert "1 job of other tenants" in body
    _, body = _get(client_for(personas.teammate), "/cluster/")
    assert "acme-secret-model" in body and "rival-secret-model" not in body
    assert "Open memory timeline" not in body                 # a member is no admin: no timeline link


@pytest.mark.parametrize("path,data", [
    ("/tenants/acme/members/", {"username": "outsider", "role": "member"}),
    ("/tenants/acme/members/{member}/", {"role": "viewer"}),
    ("/tenants/acme/members/{member}/", {"remove": "1"}),
    ("/tenants/acme/quotas/", {"max_running_jobs": "0"}),
    ("/tenants/acme/tokens/", {"name": "sneaky"}),
])
def test_outsider_posts_to_another_tenant_are_404_and_change_nothing(cluster, client_for, personas, path, data):
    member = personas.tenant.memberships.get(user=personas.teammate)
    r = client_for(personas.outsider).post(path.format(member=member.pk), data)
    assert r.status_code == 404
    member.refresh_from_db()
    personas.tenant.refresh_from_db()
    assert member.role == "member" and personas.tenant.max_running_jobs == 4
    assert personas.tenant.role_of(personas.outsider) is None
    assert not personas.outsider.api_tokens.exists()


def test_wide_windows_put_every_jobs_buckets_on_one_time_grid(cluster, client_for, personas):
    d = client_for(personas.staff).get(f"/data/devices/{cluster.device.pk}/timeline.json",
                                       {"window": 21600}).json()        # 6 h: 36 s buckets
    grids = [[p[0] for p in pts] for pts in d["series"].values()]
    assert len(grids) == 2 and grids[0] == grids[1] and all(t % 36 == 0 for t in grids[0])
    assert {p[1] for pts in d["series"].values() for p in pts} == {10 * GIB, 6 * GIB}
