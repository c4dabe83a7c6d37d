"""POST /api/code/: a project archive is checked at upload; every refused one is a 400 (413 for size) naming the
problem, with no row and no file left; identical bytes return the stored archive; personas see their own."""
import io
import os
import zipfile

import pytest

from zico.jobs.models import CodeArchive
from tests.support.jobs import project, tar_gz, zip_bytes


@pytest.fixture(autouse=True)
def code_dir(settings, tmp_path):
    settings.ZICO_CODE_DIR = tmp_path / "code"
    return settings.ZICO_CODE_DIR


def files_under(path) -> list[str]:
    return [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]


def upload(client, data: bytes, name: str = "project.tar.gz", **fields):
    f = io.BytesIO(data)
    f.name = name
    return client.post("/api/code/", {"archive": f, **fields}, format="multipart")


def test_a_member_uploads_a_project_and_gets_its_address(personas, client_for, code_dir):
    data = project()
    r = upload(client_for(personas.teammate), data)
    assert r.status_code == 201, r.content
    body = r.json()
    import hashlib

    assert body["sha256"] == hashlib.sha256(data).hexdigest()
    assert (body["size_bytes"], body["files"], body["format"], body["tenant"]) == (len(data), 2, "tar.gz", "acme")
    stored = CodeArchive.objects.get(pk=body["id"])
    assert stored.path.read_bytes() == data and stored.uploaded_by == personas.teammate


def test_the_same_bytes_again_return_the_stored_archive(personas, client_for, code_dir):
    first = upload(client_for(personas.teammate), project()).json()
    again = upload(client_for(personas.owner), project())
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    assert CodeArchive.objects.count() == 1 and len(files_under(code_dir)) == 1


def test_another_tenant_gets_its_own_row_and_never_sees_acmes(personas, client_for, code_dir):
    mine = upload(client_for(personas.teammate), project()).json()
    theirs = upload(client_for(personas.outsider), project())
    assert theirs.status_code == 201 and theirs.json()["tenant"] == "rival" and theirs.json()["id"] != mine["id"]
    assert len(files_under(code_dir)) == 1  # one file for the same bytes
    outsider = client_for(personas.outsider)
    assert outsider.get(f"/api/code/{mine['id']}/").status_code == 404
    assert [a["id"] for a in outsider.get("/api/code/").json()["results"]] == [theirs.json()["id"]]
    assert client_for(personas.viewer).get(f"/api/code/{mine['id']}/").status_code == 200


def test_viewers_and_anonymous_cannot_upload(personas, client_for, row_counts, code_dir):
    before = row_counts()
    assert upload(client_for(personas.viewer), project(), tenant="acme").status_code == 403
    assert upload(client_for(personas.outsider), project(), tenant="acme").status_code == 400  # not among theirs
    assert upload(client_for(None), project()).status_code == 401
    assert row_counts() == before and files_under(code_dir) == []


BIG = b"\0" * (20 << 20)  # 20 MiB of zeros: deflates about 1000-fold


@pytest.mark.parametrize("data,problem", [
    (tar_gz([("file", "../escape.py", b"x")]), "'..' in path"),
    (tar_gz([("file", "src/../../escape.py", b"x")]), "'..' in path"),
    (tar_gz([("file", "/etc/cron.d/job", b"x")]), "absolute path"),
    (zip_bytes([("file", "../escape.py", b"x")]), "'..' in path"),
    (zip_bytes([("file", "/abs.py", b"x")]), "absolute path"),
    (tar_gz([("symlink", "data", "../../etc")]), "symbolic link pointing outside"),
    (tar_gz([("symlink", "data", "/etc/passwd")]), "symbolic link to an absolute path"),
    (zip_bytes([("symlink", "data", "../../../etc/passwd")]), "symbolic link pointing outside"),
    (tar_gz([("symlink", "d", "."), ("file", "d/x.py", b"x")]), "goes through the symbolic link"),
    (tar_gz([("symlink", "sub/up", ".."), ("symlink", "out", "sub/up/..")]), "goes through the symbolic link"),
    (tar_gz([("hardlink", "passwd", "../../etc/passwd")]), "'..' in path"),
    (tar_gz([("hardlink", "passwd", "etc/passwd")]), "hard link to 'etc/passwd'"),
    (tar_gz([("chardev", "null")]), "device file or FIFO"),
    (tar_gz([("fifo", "pipe")]), "device file or FIFO"),
    (zip_bytes([("fifo", "pipe")]), "device file or FIFO"),
    (zip_bytes([("file", "zeros.bin", BIG)]), "compression ratio"),
    (tar_gz([("file", "zeros.bin", BIG)]), "compression ratio"),
    (tar_gz([("file", "a.py", b"1"), ("file", "a.py", b"2")]), "appears twice"),
    (b"#!/bin/sh\necho this is a script, not an archive\n", "not a tar.gz or zip archive"),
    (b"\x1f\x8b\x08\x00garbage that is not deflate", "not a valid tar.gz archive"),
    (b"", "The submitted file is empty"),
])
def test_a_hostile_or_broken_archive_is_refused_naming_the_problem_and_nothing_is_stored(
        personas, client_for, row_counts, code_dir, data, problem):
    before = row_counts()
    r = upload(client_for(personas.teammate), data)
    assert r.status_code == 400, r.content
    assert problem in " ".join(r.json()["archive"]), r.json()
    assert row_counts() == before and files_under(code_dir) == []


def test_more_files_than_the_limit_is_refused(personas, client_for, row_counts, code_dir, settings):
    settings.ZICO_CODE_MAX_FILES = 5
    before = row_counts()
    r = upload(client_for(personas.teammate), tar_gz([("file", f"f{i}.py", b"x") for i in range(6)]))
    assert r.status_code == 400 and "more than 5 members" in r.json()["archive"][0]
    assert row_counts() == before and files_under(code_dir) == []
    assert upload(client_for(personas.teammate), tar_gz([("file", f"f{i}.py", b"x") for i in range(5)])
                  ).status_code == 201


def test_more_unpacked_bytes_than_the_limit_is_refused_even_when_the_zip_lies(personas, client_for, row_counts,
                                                                             code_dir, settings):
    settings.ZICO_CODE_MAX_UNPACKED_BYTES = 1000
    before = row_counts()
    r = upload(client_for(personas.teammate), tar_gz([("file", "big.txt", os.urandom(1001))]))
    assert r.status_code == 400 and "more than 1000 bytes" in r.json()["archive"][0]
    # a zip whose central directory says 10 bytes for a member that inflates to 5000
    data = bytearray(zip_bytes([("file", "big.txt", b"a" * 5000)]))
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 24:cd + 28] = (10).to_bytes(4, "little")
    local = data.find(b"PK\x03\x04")
    data[local + 22:local + 26] = (10).to_bytes(4, "little")
    r = upload(client_for(personas.teammate), bytes(data), "lie.zip")
    assert r.status_code == 400, r.content
    assert row_counts() == before and files_under(code_dir) == []


def test_an_archive_over_the_size_limit_is_a_413(personas, client_for, row_counts, code_dir, settings):
    settings.ZICO_CODE_MAX_BYTES = 1000
    before = row_counts()
    r = upload(client_for(personas.teammate), tar_gz([("file", "noise.bin", os.urandom(4000))]))
    assert r.status_code == 413 and "limit of 1000 bytes" in r.json()["detail"]
    assert row_counts() == before and files_under(code_dir) == []


def test_a_zip_project_is_accepted_too(personas, client_for):
    r = upload(client_for(personas.teammate), zip_bytes([("dir", "pkg"), ("file", "pkg/m.py", b"x"),
                                                         ("symlink", "link.py", "pkg/m.py")]), "p.zip")
    assert r.status_code == 201 and (r.json()["format"], r.json()["files"]) == ("zip", 1)
    assert zipfile.is_zipfile(CodeArchive.objects.get().path)
