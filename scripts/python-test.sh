#!/usr/bin/env bash
# Builds the Python package (python/) into a virtual environment under target/ and runs its
# pytest suite against the real torch and numpy. The venv sees the system site-packages, where
# .ci/run installs torch, numpy and pytest, so nothing large is installed twice.
#
# The extension is built by cargo in the same shape as `cargo test --workspace` (every member,
# test targets selected, `test` profile), so feature unification picks the same dependency
# features and every dependency that run compiled is reused: only pyo3 and the bindings compile.
# (`maturin develop` builds `-p shardtool-python` alone, which leaves out the features the
# workspace's dev-dependencies turn on, e.g. serde/alloc, bitflags/std, and so compiled 22
# dependencies and 9 workspace crates a second time, the latter again after every edit.) The install is an editable one, as `maturin develop` makes for this
# mixed layout: the module is copied beside the Python sources and a .pth puts python/ on the
# venv's path. `pip install ./python` is the release install (README).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=target/python-venv
if ! [ -x "$VENV/bin/python" ]; then
  python3 -m venv --system-site-packages "$VENV"
fi
for mod in torch numpy pytest; do
  "$VENV/bin/python" -c "import $mod" 2>/dev/null || {
    echo "python-test: the Python module '$mod' is missing (.ci/run installs it)" >&2
    exit 1
  }
done

# maturin sets PYO3_BUILD_EXTENSION_MODULE for an extension module (no libpython link); so do we.
artifacts=$(PYO3_BUILD_EXTENSION_MODULE=1 cargo build --workspace --lib --tests --profile test \
  --locked --message-format=json-render-diagnostics)
so=$(python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "_shardtool":
        print(*[f for f in m["filenames"] if f.endswith(".so")])
' <<<"$artifacts")
[ -f "$so" ] || {
  echo "python-test: cargo reported no _shardtool library" >&2
  exit 1
}
# Copy then rename: a process that has the old module mapped keeps its file intact.
cp "$so" python/shardtool/_shardtool.abi3.so.tmp
mv -f python/shardtool/_shardtool.abi3.so.tmp python/shardtool/_shardtool.abi3.so
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$PWD/python" >"$site/shardtool.pth"
# Another install of shardtool in the venv would shadow this one: refuse to test it.
pkg="$PWD/python/shardtool"
(cd python/tests && "../../$VENV/bin/python" -c '
import os, sys, shardtool, shardtool._shardtool as ext
want = os.path.realpath(sys.argv[1])
for f in (shardtool.__file__, ext.__file__):
    if not os.path.realpath(f).startswith(want + os.sep):
        sys.exit(f"python-test: shardtool is imported from {f}, not from {want}")
' "$pkg")

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
