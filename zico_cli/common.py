"""What several ``zico`` commands share: the ``--json`` option and output, the signed-in API, ``--env K=V`` pairs, and
packing and uploading a project directory (``submit`` and ``curve import --for``)."""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import click

from . import config
from .api import Api
from .follow import human_bytes
from .pack import pack
from .upload import upload_archive

ENV_RE = re.compile(r"([^=]+)=(.*)", re.S)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")(f)


def out(as_json: bool, data, text: str) -> None:
    click.echo(json.dumps(data, indent=2) if as_json else text)


def connect() -> Api:
    c = config.load()
    return Api(c["url"], c["token"])


def parse_env(pairs: tuple[str, ...]) -> dict[str, str]:
    """``("SEED=1", "NOTE=a=b")`` -> ``{"SEED": "1", "NOTE": "a=b"}``; a usage error (exit 2) names a bad pair."""
    variables = {}
    for item in pairs:
        m = ENV_RE.fullmatch(item)
        if not m:
            raise click.BadParameter(f"{item!r}: expected NAME=value", param_hint="--env")
        variables[m.group(1)] = m.group(2)
    return variables


def upload_project(api: Api, directory: Path, tenant: str | None, as_json: bool) -> dict:
    """Pack ``directory`` (honouring .gitignore and .zicoignore) and upload it: the code archive's JSON."""
    with tempfile.TemporaryDirectory(prefix="zico-pack-") as tmp:
        archive_path = Path(tmp) / f"{directory.resolve().name or 'project'}.tar.gz"
        packed = pack(directory, archive_path)
        if not as_json:
            click.echo(f"Packed {packed.files} files ({human_bytes(packed.unpacked_bytes)}) into "
                       f"{human_bytes(archive_path.stat().st_size)}.", err=True)
        return upload_archive(api, archive_path, tenant, show_progress=not as_json)
