"""Suite-wide pytest setup: the fast tier (``--fast``: no test that needs PostgreSQL, Redis, a browser or more
than ~20 s); skip `gpu`-marked tests where no NVIDIA GPU is visible; one torch thread for
the folders whose tests train small models; a headless browser on the live server for the tests that drive the
pages (tests/ui, and the whole-stack browser test in tests/integration); a real PyTorch memory snapshot for the
tests that upload one (tests/api, tests/cli, tests/ui). The test helpers of tests/support/ (``servers``: private
Redis and PostgreSQL servers, a device worker started the documented way) are importable by every test."""
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # tests/support/: the tests' helpers


def _gpu_visible() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# -- the fast tier (scripts/test.sh --fast) ---------------------------------------------------------------
# A test needs a service when it is marked for the database (pytest-django's ``django_db``), asks for one of
# these fixtures (directly or through another fixture), or sits in a module marked ``services`` (one that
# reaches Redis, PostgreSQL or a live server by itself). The fast tier runs with both services' URLs pointed
# at a closed port, so a test that needs one and is not marked here fails loudly instead of passing by luck.
SERVICE_FIXTURES = frozenset({
    "db", "transactional_db", "django_db_reset_sequences", "live_server", "client", "admin_client",
    "admin_user", "django_user_model", "browser", "page", "sign_in", "estimate_redis",
    # the folders' own fixtures that reach Redis (their conftest.py files)
    "rdb", "redis_url", "redis_server", "stack_env", "fresh_counters", "worker_queue",
})


def pytest_addoption(parser):
    parser.addoption("--fast", action="store_true",
                     help="the fast tier: skip tests that need PostgreSQL, Redis, a browser, a GPU or are slow")


def needs_services(item) -> bool:
    """True when ``item`` needs PostgreSQL, Redis or a browser (see SERVICE_FIXTURES above)."""
    return (item.get_closest_marker("django_db") is not None or item.get_closest_marker("services") is not None
            or not SERVICE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config, items):
    if config.getoption("fast", default=False):
        kept, dropped = [], []
        for item in items:
            slow = item.get_closest_marker("slow") or item.get_closest_marker("gpu")
            (dropped if slow or needs_services(item) else kept).append(item)
        items[:] = kept
        config.hook.pytest_deselected(items=dropped)
    if any("gpu" in item.keywords for item in items) and not _gpu_visible():
        skip = pytest.mark.skip(reason="no NVIDIA GPU visible (run scripts/gpu-check.sh on a GPU host)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


# Torch runs these folders' tests with one intra-op thread: on shared, loaded cores OpenMP
# synchronisation between two threads costs milliseconds per operator and makes small-model tests
# many times slower. Other tests never import torch for it.
ONE_TORCH_THREAD_DIRS = {"curves", "workloads"}


@pytest.fixture(autouse=True)
def one_torch_thread(request):
    if request.path.parent.name not in ONE_TORCH_THREAD_DIRS:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# -- a real PyTorch memory snapshot (tests/curves/data/README.md) ------------------------------------------
@pytest.fixture(scope="session")
def torch_snapshot() -> bytes:
    """The bytes of a real ``torch.cuda.memory._dump_snapshot()`` pickle: tests/curves/data/lm-fullstep-a (1.3 MB,
    6,486 events of a GPT-style LM's forward, backward and optimizer step on a GPU)."""
    return lzma.decompress((Path(__file__).parent / "curves" / "data" / "lm-fullstep-a.pickle.xz").read_bytes())


# -- browser (Playwright driving Debian's chromium; never `playwright install`) --------------------------
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VENDOR_JS = Path(__file__).resolve().parents[1] / "frontend" / "static" / "vendor" / "echarts" / "echarts.min.js"


@pytest.fixture
def browser(monkeypatch):
    """A headless Chromium for one test. Fails with the fix named when chromium or the chart library is
    missing (scripts/setup.sh installs the one and builds the other).

    Playwright's sync API keeps an asyncio loop running in this thread, which trips Django's async-safety
    check on every ORM call the test itself makes; the check is lifted for this test only (the live
    server answers from its own thread, where it still applies).
    """
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (scripts/setup.sh does)")
    if not VENDOR_JS.exists():
        pytest.fail(f"{VENDOR_JS} is missing: run `npm ci && npm run build` in frontend/")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        # While Playwright's loop runs, Django keeps this thread's connections in a context-local store
        # (asgiref), apart from the usual ones: close them here, or they outlive the test database.
        from django.db import connections

        connections.close_all()
        b.close()


@pytest.fixture
def page(browser, live_server):
    """A fresh browser page (own cookies) whose console errors and failed requests fail the test."""
    context = browser.new_context(viewport={"width": 1360, "height": 900}, base_url=live_server.url)
    pg = context.new_page()
    problems: list[str] = []
    pg.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    pg.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    yield pg
    pg.goto("about:blank")  # stop the page's polling before the live server and database go away
    context.close()
    assert not problems, problems


@pytest.fixture
def sign_in(page):
    """sign_in(user) fills in and submits the real sign-in form in the browser."""
    from tests.support.tenants import PASSWORD

    def go(user):
        page.goto("/login/")
        page.get_by_label("Username").fill(user.get_username())
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/")
    return go


@pytest.fixture
def estimate_redis(settings, tmp_path):
    """Redis (``REDIS_URL``) with no estimate requests or failures (``zico:estimate:*``, zico_contracts.keys) before
    and after the test; the estimate cache in the test's own folder."""
    import redis

    settings.ZICO_ESTIMATE_CACHE_DIR = tmp_path / "estimates"
    r = redis.Redis.from_url(settings.REDIS_URL)

    def clean():
        for key in r.scan_iter("zico:estimate:*"):
            r.delete(key)

    clean()
    yield r
    clean()
