#!/usr/bin/env bash
# Start the test session's second Docker engine: `pytest -n 2` runs two lanes at once (tests/lanes.py), and
# the side lane builds on an engine of its own, so that each lane's per-module cleanup (containers, tags, BuildKit's
# cache) touches only what that lane made. Its own data root, exec root, socket, pid file and bridge (docker0 is
# the first engine's); it reaches Debian's mirror like the first. Exits non-zero, loudly, if it never answers.
#   usage: start-lane-engine.sh        (prints the socket: unix:///var/run/torchimages-lane.sock)
set -euo pipefail
socket=${TORCHIMAGES_LANE_SOCKET:-/var/run/torchimages-lane.sock}
root=${TORCHIMAGES_LANE_ROOT:-/var/lib/torchimages-lane-docker}
exec_root=/var/run/torchimages-lane-docker
pidfile=/var/run/torchimages-lane-docker.pid
bridge=tilane0
subnet=172.30.231.1/24
log=${DOCKERD_LANE_LOG:-/tmp/dockerd-lane.log}
wait_s=${DOCKERD_WAIT:-60}

answers() { DOCKER_HOST="unix://${socket}" timeout 5 docker version --format '{{.Server.Version}}' > /dev/null 2>&1; }

if answers; then
    echo "lane engine: already answering at unix://${socket}"
    exit 0
fi
command -v dockerd > /dev/null || { echo "lane engine: FAILED: no dockerd; run scripts/start-engine.sh first" >&2; exit 1; }
if ! ip link show "${bridge}" > /dev/null 2>&1; then
    ip link add name "${bridge}" type bridge
    ip addr add "${subnet}" dev "${bridge}"
fi
ip link set "${bridge}" up
if [ -f "${pidfile}" ] && ! kill -0 "$(cat "${pidfile}")" 2> /dev/null; then
    rm -f "${pidfile}"
fi
mkdir -p "${exec_root}"
echo '{}' > "${exec_root}.json"   # a configuration of its own: never the first engine's /etc/docker/daemon.json
echo "lane engine: starting dockerd at unix://${socket} (data root ${root}; log: ${log})"
setsid nohup dockerd --host "unix://${socket}" --data-root "${root}" --exec-root "${exec_root}" --pidfile "${pidfile}" \
    --bridge "${bridge}" --config-file "${exec_root}.json" > "${log}" 2>&1 < /dev/null &
for _ in $(seq "${wait_s}"); do
    if answers; then
        echo "lane engine: answering at unix://${socket}"
        exit 0
    fi
    sleep 1
done
echo "lane engine: FAILED: dockerd did not answer at unix://${socket} within ${wait_s} s; last lines of ${log}:" >&2
tail -20 "${log}" >&2 || true
exit 1
