"""A fresh deployment can submit an LM job at once: `migrate` writes the built-in corpus under ZICO_DATA_DIR."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_migrate_writes_the_builtin_corpus_so_an_lm_job_validates(tmp_path):
    data = tmp_path / "data"
    env = {**os.environ, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "zico.settings", "ZICO_DATA_DIR": str(data),
           "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "ZICO_VAR_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=env, check=True)
    corpus = data / "corpus" / "python-docs.txt"
    assert corpus.is_file() and corpus.stat().st_size > 10_000
    check = ("from zico_workloads.catalog import validate_params; import sys; "
             f"print(validate_params('tiny-lm', {{}}, data_dir={str(data)!r})['corpus'])")
    out = subprocess.run([sys.executable, "-c", check], cwd=REPO, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
