"""Curve-test fixtures: the real PyTorch memory snapshots in data/ (xz-compressed, see data/README.md),
decompressed once per session."""
import lzma
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
REAL_SNAPSHOTS = sorted(p.name.removesuffix(".xz") for p in DATA.glob("*.pickle.xz"))


@pytest.fixture(scope="session")
def real_snapshot_dir(tmp_path_factory) -> Path:
    """A folder holding each of REAL_SNAPSHOTS as a plain ``.pickle`` file."""
    out = tmp_path_factory.mktemp("torch-snapshots")
    for name in REAL_SNAPSHOTS:
        (out / name).write_bytes(lzma.decompress((DATA / f"{name}.xz").read_bytes()))
    return out


@pytest.fixture(params=REAL_SNAPSHOTS)
def real_snapshot(request, real_snapshot_dir) -> Path:
    """Each real snapshot in turn, as the path of a ``.pickle`` file."""
    return real_snapshot_dir / request.param
