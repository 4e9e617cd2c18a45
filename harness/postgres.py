"""A throwaway PostgreSQL server for tests and benchmarks: Debian's postgresql (installed by
`scripts/setup.sh --test`), a cluster made by initdb in a temporary folder, on a free port of
127.0.0.1, stopped and deleted whatever happens. PostgreSQL refuses to run as root, so as root
it runs as the user ``nobody``."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .browser import free_port

USER = "anychat"


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's programs, if any."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda path: int(Path(path).parent.parent.name))
    return Path(found[-1]).parent if found else None


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running PostgreSQL; yields its URL (user anychat, no password, database postgres)."""
    programs = postgres_bin()
    if programs is None:
        raise RuntimeError("PostgreSQL is not installed: apt-get install -y postgresql (scripts/setup.sh --test does).")
    root = Path(tempfile.mkdtemp(prefix="anychat-postgres-"))
    as_user = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
    if as_user:
        os.chmod(root, 0o755)
        shutil.chown(root, "nobody")
    data, port = root / "data", free_port()

    def run(*command: str) -> None:
        subprocess.run([*as_user, *command], check=True, capture_output=True, cwd=root)

    started = False
    try:
        run(str(programs / "initdb"), "-D", str(data), "-U", USER, "--auth=trust", "--no-sync", "-E", "UTF8")
        options = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} -c fsync=off"
        run(str(programs / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-o", options, "-w", "start")
        started = True
        yield f"postgresql://{USER}@127.0.0.1:{port}/postgres"
    finally:
        if started:
            subprocess.run([*as_user, str(programs / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True, cwd=root)
        shutil.rmtree(root, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server at ``server_url``; its URL."""
    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + "/" + name
