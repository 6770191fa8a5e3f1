#!/usr/bin/env bash
# Local object storage for the dct-dataset cloud tests, on loopback only:
#   * moto (S3 API) on 127.0.0.1:5555 with a bucket "testbucket"
#   * nginx (plain HTTP with range GETs) on 127.0.0.1:8088, serving $DIR/www
#
# Usage:
#   scripts/test-services.sh start   # installs what is missing, starts both, prints the variables to export
#   scripts/test-services.sh stop    # stops both (by the pids recorded at start)
#   scripts/test-services.sh env     # prints the variables again
#
# Then:
#   eval "$(scripts/test-services.sh env)"
#   cargo test -p dct-dataset --features aws,http --test cloud
#
# Without the variables the cloud tests skip themselves, so `cargo test` passes without servers.
set -euo pipefail

DIR="${DCT_SERVICES_DIR:-/tmp/dct-services}"
S3_PORT="${DCT_S3_PORT:-5555}"
HTTP_PORT="${DCT_HTTP_PORT:-8088}"

print_env() {
    echo "export DCT_S3_ENDPOINT=http://127.0.0.1:${S3_PORT}"
    echo "export DCT_S3_BUCKET=testbucket"
    echo "export DCT_HTTP_URL=http://127.0.0.1:${HTTP_PORT}"
    echo "export DCT_HTTP_ROOT=${DIR}/www"
}

wait_for() { # url
    for _ in $(seq 1 50); do
        if curl -s -o /dev/null "$1"; then return 0; fi
        sleep 0.2
    done
    echo "service at $1 did not come up" >&2
    return 1
}

start() {
    mkdir -p "$DIR"
    # moto, in its own venv (moto[server] brings Flask and boto3).
    if [ ! -x "$DIR/venv/bin/moto_server" ]; then
        python3 -m venv "$DIR/venv"
        "$DIR/venv/bin/pip" install -q "moto[server]"
    fi
    if [ ! -f "$DIR/moto.pid" ] || ! kill -0 "$(cat "$DIR/moto.pid")" 2>/dev/null; then
        "$DIR/venv/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT" >"$DIR/moto.log" 2>&1 &
        echo $! >"$DIR/moto.pid"
    fi
    wait_for "http://127.0.0.1:${S3_PORT}/"
    curl -s -o /dev/null -X PUT "http://127.0.0.1:${S3_PORT}/testbucket"

    # nginx: static files with range support (and WebDAV PUT), run in the foreground as a background job.
    if ! command -v nginx >/dev/null; then
        apt-get install -y nginx-light >/dev/null || { apt-get update >/dev/null && apt-get install -y nginx-light >/dev/null; }
    fi
    mkdir -p "$DIR/www" "$DIR/tmp"
    chown -R nobody:nogroup "$DIR/www" "$DIR/tmp" 2>/dev/null || true
    cat >"$DIR/nginx.conf" <<EOF
worker_processes 1; daemon off; pid $DIR/nginx.pid; error_log $DIR/nginx-error.log warn;
events { worker_connections 256; }
http {
  access_log $DIR/nginx-access.log; client_body_temp_path $DIR/tmp;
  server { listen 127.0.0.1:${HTTP_PORT}; root $DIR/www; client_max_body_size 0;
    location / { dav_methods PUT DELETE MKCOL; create_full_put_path on; dav_access user:rw group:r all:r; } } }
EOF
    if [ ! -f "$DIR/nginx.pid" ] || ! kill -0 "$(cat "$DIR/nginx.pid")" 2>/dev/null; then
        nginx -c "$DIR/nginx.conf" -e "$DIR/nginx-error.log" >/dev/null 2>&1 &
    fi
    wait_for "http://127.0.0.1:${HTTP_PORT}/"
    print_env
}

stop() {
    for f in moto.pid nginx.pid; do
        if [ -f "$DIR/$f" ]; then
            kill "$(cat "$DIR/$f")" 2>/dev/null || true
            rm -f "$DIR/$f"
        fi
    done
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    env) print_env ;;
    *) echo "usage: $0 start|stop|env" >&2; exit 2 ;;
esac
