#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io when dockerd is missing, start it
# in the background (there is no systemd on CI machines) and wait. Exits non-zero, loudly, if the
# engine never answers.
set -euo pipefail
log=${DOCKERD_LOG:-/tmp/dockerd.log}
wait_s=${DOCKERD_WAIT:-60}

answers() { timeout 5 docker version --format '{{.Server.Version}}' > /dev/null 2>&1; }

if answers; then
    echo "engine: already answering (server $(docker version --format '{{.Server.Version}}'))"
    exit 0
fi
if ! command -v dockerd > /dev/null; then
    echo "engine: installing docker.io from Debian"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q docker.io > /tmp/apt-docker-io.log 2>&1 \
        || { apt-get update -q > /dev/null && apt-get install -y -q docker.io > /tmp/apt-docker-io.log 2>&1; } \
        || { echo "engine: FAILED to install docker.io; see /tmp/apt-docker-io.log" >&2; tail -20 /tmp/apt-docker-io.log >&2; exit 1; }
fi
# A pid file left by an engine that died blocks the next start.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2> /dev/null; then
    rm -f /var/run/docker.pid
fi
echo "engine: starting dockerd (log: ${log})"
setsid nohup dockerd > "${log}" 2>&1 < /dev/null &
for _ in $(seq "${wait_s}"); do
    if answers; then
        echo "engine: answering (server $(docker version --format '{{.Server.Version}}'))"
        exit 0
    fi
    sleep 1
done
echo "engine: FAILED: dockerd did not answer within ${wait_s} s; last lines of ${log}:" >&2
tail -20 "${log}" >&2 || true
exit 1
