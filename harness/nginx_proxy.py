"""nginx in front of several app processes, set up as docs/cluster.md shows it (sticky by the
client's address, streams passed on as they come), on a free port of 127.0.0.1, for the tests:
Debian's nginx (installed by `scripts/setup.sh --test`), its files in a folder of its own,
stopped whatever happens."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .browser import free_port
from .processes import stop_process

# The access log names the replica each request went to ($upstream_addr: every one tried, in order).
CONFIG = """
{user}
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log;
events {{ worker_connections 256; }}
http {{
    log_format replicas '$status $request_method $uri | $upstream_addr';
    access_log {folder}/access.log replicas;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    client_max_body_size 100m;
    upstream anychat {{
        ip_hash;
{servers}
    }}
    server {{
        listen 127.0.0.1:{port};
        location {prefix} {{
            proxy_pass http://anychat{upstream_path};
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_buffering off;
            proxy_read_timeout 3600s;
        }}
    }}
}}
"""


@contextmanager
def nginx_proxy(replicas: list[str], folder: Path, prefix: str = "/") -> Iterator[str]:
    """nginx passing requests under ``prefix`` to ``replicas`` (their URLs), without it; yields
    its own URL, the prefix included."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise RuntimeError("nginx is not installed: apt-get install -y nginx (scripts/setup.sh --test does).")
    port = free_port()
    servers = "\n".join(f"        server {url.split('://', 1)[1].rstrip('/')};" for url in replicas)
    config = folder / "nginx.conf"
    # As root, nginx's workers would run as nobody, who cannot write its folder.
    user = "user root root;" if os.geteuid() == 0 else ""
    # Under a prefix, nginx passes the path on without it; at / the path goes as the client sent it
    # (a path in proxy_pass would have nginx decode and normalise it first).
    upstream_path = "" if prefix == "/" else "/"
    config.write_text(CONFIG.format(user=user, folder=folder, servers=servers, port=port, prefix=prefix, upstream_path=upstream_path))
    process = subprocess.Popen([nginx, "-p", str(folder), "-c", str(config), "-g", "daemon off;"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nginx did not start: {process.stderr.read().decode(errors='replace')}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}{prefix}"
    finally:
        stop_process(process, 10)


def replicas_used(folder: Path) -> list[str]:
    """The replica (host:port) that answered each request so far, in order, from the access log."""
    log = folder / "access.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.rsplit("| ", 1)[1].split(",")[-1].strip() for line in lines]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0
