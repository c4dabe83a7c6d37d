"""Where the ``zico`` command keeps the server URL and the API token: ``$XDG_CONFIG_HOME/zico/config.json``
(default ``~/.config/zico/config.json``), mode 0600 in a 0700 directory, written atomically."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from .errors import CliError


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "zico" / "config.json"


def load() -> dict[str, str]:
    """``{"url", "token"}``; CliError when nobody signed in yet or the file is unreadable."""
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CliError("not signed in: run `zico login URL` first") from None
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read {path}: {exc}; run `zico login URL` again") from None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str) or not isinstance(data.get("token"), str):
        raise CliError(f"{path} holds no url and token; run `zico login URL` again")
    return data


def save(url: str, token: str) -> Path:
    """Write the config (0600) and return its path."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"url": url, "token": token}, f, indent=2)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
