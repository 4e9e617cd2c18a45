#!/usr/bin/env bash
# `uv pip` on a venv, with the package sources pip is configured with here: uv installs the wheels
# pip would, from the same indexes, but unpacks them in parallel and links them from its cache
# (installing torch and torchvision again: 43 s with pip, under a second with uv). uv does not
# read pip's configuration, so its index, extra indexes, find-links, constraints and certificate
# are handed over (pip.conf and PIP_* alike, as `pip config list` shows them), where uv's own
# variables do not already say.
#   bash scripts/uv_pip.sh VENV install|uninstall ARGS...
set -euo pipefail
venv=$1
shift
# In the venv itself, so that nothing outside it is needed or changed.
[ -x "$venv/bin/uv" ] || "$venv/bin/python" -m pip install --quiet --disable-pip-version-check uv==0.13.9
eval "$("$venv/bin/python" - <<'PY'
import os, shlex, subprocess, sys

listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
pip = {}
# Files first, then PIP_* (listed as ":env:"), which pip lets override them.
for line in sorted(listed.splitlines(), key=lambda line: line.startswith(":env:")):
    name, _, value = line.partition("=")
    pip[name.split(".", 1)[-1]] = value.strip().strip("'\"")
# pip's option, uv's variable, and how uv separates several values.
for option, variable, separator in [("index-url", "UV_INDEX_URL", " "), ("extra-index-url", "UV_EXTRA_INDEX_URL", " "),
                                    ("find-links", "UV_FIND_LINKS", ","), ("constraint", "UV_CONSTRAINT", " "),
                                    ("cert", "SSL_CERT_FILE", " ")]:
    if pip.get(option) and variable not in os.environ:
        print(f"export {variable}={shlex.quote(separator.join(pip[option].split()))}")
PY
)"
# pip takes the best version over all its sources; uv by default the first source that has the package.
export UV_INDEX_STRATEGY=${UV_INDEX_STRATEGY:-unsafe-best-match}
command=$1
shift
exec "$venv/bin/uv" pip "$command" --quiet --python "$venv/bin/python" "$@"
