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


class PostgresServer:
    """A cluster of its own in a temporary folder, started, stopped and started again on one port."""

    def __init__(self) -> None:
        self.programs = postgres_bin()
        if self.programs is None:
            raise RuntimeError("PostgreSQL is not installed: apt-get install -y postgresql (scripts/setup.sh --test does).")
        self.root = Path(tempfile.mkdtemp(prefix="anychat-postgres-"))
        self.as_user = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            os.chmod(self.root, 0o755)
            shutil.chown(self.root, "nobody")
        self.data, self.port = self.root / "data", free_port()
        self.url = f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"
        self._run("initdb", "-D", str(self.data), "-U", USER, "--auth=trust", "--no-sync", "-E", "UTF8")

    def _run(self, program: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.programs / program), *args], check=True, capture_output=True, cwd=self.root)

    def start(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.root} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options, "-w", "start")

    def stop(self) -> None:
        """Stopped at once, as a crash stops it: open connections are cut."""
        subprocess.run([*self.as_user, str(self.programs / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       capture_output=True, cwd=self.root)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """A running PostgreSQL (user anychat, no password, database postgres), removed afterwards."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server at ``server_url``; its URL."""
    import psycopg

    name = f"test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as connection:
        connection.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + "/" + name
