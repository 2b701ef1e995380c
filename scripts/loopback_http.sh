# Sourced by the remote benchmarks (scripts/bench_remote.sh, scripts/bench_cache_scale.sh):
# builds the release binary (BIN), makes a scratch folder (TMP) removed at exit, and defines
# serve_folder, which serves a folder over loopback HTTP with lighttpd.
command -v lighttpd >/dev/null || [ -x /usr/sbin/lighttpd ] || { echo "needs lighttpd (apt-get install lighttpd lighttpd-mod-webdav)"; exit 2; }
command -v curl >/dev/null || { echo "needs curl"; exit 2; }
cargo build --release -q -p shardtool
BIN=$PWD/target/release/shardtool
TMP=$(mktemp -d)
cleanup() { [ -n "${LPID:-}" ] && kill "$LPID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

# serve_folder ROOT PROBE [webdav]: lighttpd on a free port serving ROOT (with WebDAV listing
# when asked), waited for until PROBE, a path under ROOT, answers. Sets PORT and LPID.
serve_folder() {
  local root=$1 probe=$2 webdav=${3:-}
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  {
    echo "server.document-root = \"$root\""
    echo "server.bind = \"127.0.0.1\""
    echo "server.port = $PORT"
    echo "server.errorlog = \"$TMP/lighttpd.err\""
    if [ -n "$webdav" ]; then
      echo 'server.modules = ("mod_webdav")'
      echo 'webdav.activate = "enable"'
      echo 'webdav.opts = ("propfind-depth-infinity" => "enable")'
    fi
  } > "$TMP/lighttpd.conf"
  /usr/sbin/lighttpd -D -f "$TMP/lighttpd.conf" & LPID=$!
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/$probe" -o /dev/null && break; sleep 0.1; done
}
