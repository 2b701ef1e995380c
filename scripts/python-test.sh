#!/usr/bin/env bash
# Builds the Python package (python/) into a virtual environment under target/ and runs its
# pytest suite against the real torch and numpy. The venv sees the system site-packages, where
# .ci/run installs torch, numpy, pytest and maturin, so nothing large is installed twice; the
# extension is a dev build in the workspace's target/, reusing the compiled dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=target/python-venv
if ! [ -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV"
fi
command -v maturin >/dev/null || {
  echo "python-test: maturin is missing (.ci/run installs it)" >&2
  exit 1
}
for mod in torch numpy pytest; do
  "$VENV/bin/python" -c "import $mod" 2>/dev/null || {
    echo "python-test: the Python module '$mod' is missing (.ci/run installs it)" >&2
    exit 1
  }
done
VIRTUAL_ENV="$PWD/$VENV" PATH="$PWD/$VENV/bin:$PATH" \
  maturin develop --quiet --manifest-path python/Cargo.toml
# Run from the tests folder, so `import shardtool` is the installed package.
set +e
(cd python/tests && "../../$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@")
status=$?
set -e
if [ "$status" = 5 ]; then
  # Exit status 5: no test was collected, which must never pass silently.
  echo "python-test: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
