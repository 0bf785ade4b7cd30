#!/usr/bin/env bash
# Start the test session's second Docker engine: `pytest -n 2` runs two lanes at once (tests/session/lanes.py), and
# the side lane builds on an engine of its own, so that each lane's per-module cleanup (containers, tags, BuildKit's
# cache) touches only what that lane made. Its own data root, exec root, socket, pid file and bridge (docker0 is
# the first engine's); it reaches Debian's mirror like the first. Exits non-zero, loudly, if it never answers.
# Its address is TORCHIMAGES_SIDE_ENGINE (default unix:///var/run/torchimages-side.sock), as the tests read it.
#   usage: start-side-engine.sh
set -euo pipefail
address=${TORCHIMAGES_SIDE_ENGINE:-unix:///var/run/torchimages-side.sock}
socket=${address#unix://}
root=/var/lib/torchimages-side-docker
exec_root=/var/run/torchimages-side-docker
pidfile=/var/run/torchimages-side-docker.pid
bridge=tiside0
subnet=172.30.231.1/24
log=/tmp/dockerd-side.log
wait_s=${DOCKERD_WAIT:-60}

answers() { DOCKER_HOST="unix://${socket}" timeout 5 docker version --format '{{.Server.Version}}' > /dev/null 2>&1; }

if answers; then
    echo "side engine: already answering at unix://${socket}"
    exit 0
fi
command -v dockerd > /dev/null || { echo "side engine: FAILED: no dockerd; run scripts/start-engine.sh first" >&2; exit 1; }
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
echo "side engine: starting dockerd at unix://${socket} (data root ${root}; log: ${log})"
setsid nohup dockerd --host "unix://${socket}" --data-root "${root}" --exec-root "${exec_root}" --pidfile "${pidfile}" \
    --bridge "${bridge}" --config-file "${exec_root}.json" > "${log}" 2>&1 < /dev/null &
for _ in $(seq "${wait_s}"); do
    if answers; then
        echo "side engine: answering at unix://${socket}"
        exit 0
    fi
    sleep 1
done
echo "side engine: FAILED: dockerd did not answer at unix://${socket} within ${wait_s} s; last lines of ${log}:" >&2
tail -20 "${log}" >&2 || true
exit 1
