"""Weights & Biases: one W&B run per logged run (``wandb.init(reinit="create_new")``, so a
sweep call's points are logged side by side), grouped by the run's group.

Mode: offline when WANDB_MODE=offline (or dryrun), when no W&B login is found
(WANDB_API_KEY or ``wandb login``'s netrc entry) or when the W&B host cannot be reached;
the reason and the folder to upload later (``wandb sync <folder>``) are said once on
stderr. WANDB_MODE=disabled logs nothing. The run's folder is under $WANDB_DIR (default:
the working folder's ``wandb/``). Parameters go in as the run's config, metrics with
step = rounds done, the summary as the run's summary. A resumed run reopens the same run
id (online: the same W&B run; offline: a second folder of that id, both uploaded by
``wandb sync``).
"""

from __future__ import annotations

import netrc
import os
import socket
import sys
from urllib.parse import urlparse

PROJECT = "fedclust_jax"
_said = set()


def _logged_in(host: str) -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
        return os.path.exists(path) and netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _reachable(host: str, port: int, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def mode() -> tuple[str, str | None]:
    """("online" | "offline" | "disabled", why offline)."""
    asked = (os.environ.get("WANDB_MODE") or "").lower()
    if asked in ("offline", "dryrun"):
        return "offline", f"WANDB_MODE={asked}"
    if asked == "disabled":
        return "disabled", None
    url = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")
    host = url.hostname or "api.wandb.ai"
    if not _logged_in(host):
        return "offline", "no W&B login: `wandb login` or WANDB_API_KEY"
    if not _reachable(host, url.port or (443 if url.scheme == "https" else 80)):
        return "offline", f"{host} cannot be reached"
    return "online", None


class WandBRun:
    """One logged run (``tracking.Sink`` handle)."""

    def __init__(self, project: str | None, run):
        import wandb
        from fedclust_jax.tracking import new_id
        resume = run.resume or {}
        how, why = mode()
        self.id = resume.get("id") or new_id()
        self.last = int(resume.get("step", 0))
        self.run = wandb.init(
            project=project or os.environ.get("WANDB_PROJECT") or PROJECT, id=self.id,
            name=run.name, group=run.group, config=None if resume else run.params,
            resume="allow", mode=how, reinit="create_new",
            dir=os.environ.get("WANDB_DIR") or os.getcwd(),   # read at each run, not once
            settings=wandb.Settings(silent=True, console="off", disable_git=True,
                                    save_code=False))
        if how == "offline":
            folder = os.path.dirname(os.path.abspath(self.run.dir))
            root = os.path.dirname(folder)
            if root not in _said:
                _said.add(root)
                print(f"fedclust-jax: W&B logs offline ({why}); upload later with "
                      f"`wandb sync {os.path.join(root, 'offline-run-*')}`",
                      file=sys.stderr, flush=True)

    def state(self) -> dict:
        return {"id": self.id, "step": self.last}

    def log(self, step: int, values: dict):
        self.run.log(dict(values), step=int(step))
        self.last = max(self.last, int(step))

    def summary(self, values: dict):
        self.run.summary.update(dict(values))

    def flush(self):
        pass

    def close(self, status: str):
        self.run.finish(exit_code={"finished": 0, "interrupted": 255}.get(status, 1))
