"""The `platform/` source root must never shadow the standard library's `platform` module."""
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_platform_inside_django_is_the_standard_library():
    code = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'zico.test_settings'); django.setup();"
        "import platform, uuid; print(platform.__file__); print(platform.python_version())"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    path, version = out.stdout.split()
    assert Path(path).parent == Path(sysconfig.get_paths()["stdlib"])
    assert version.startswith("3.")


def test_manage_py_check_runs_from_the_repo_root():
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, capture_output=True, text=True,
                         env={"DEBUG": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert not (REPO / "platform" / "__init__.py").exists()
