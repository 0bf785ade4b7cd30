#!/usr/bin/env bash
# Start the current Docker engine generation, dockerd 26 with the containerd image store (as Docker 29 installs by
# default and Docker Desktop runs), beside the 20.10 engines here (docs/engines.md): the test session's current lane
# (tests/session/lanes.py, opt-in: pytest -n 3 --current-engine) runs the CPU release on it. Its binaries are Debian 13's docker.io,
# containerd and docker-cli, checked and unpacked by scripts/install-current-engine.sh (run here when missing). Its own configuration (the containerd-snapshotter
# feature), socket, data root, exec root, pid file, containerd (dockerd starts the packaged 1.7 from PATH) and bridge:
# never `--bridge none`, which deletes another engine's docker0. It reaches Debian's mirror like the first. Exits
# non-zero, loudly, if it never answers, or if what answers at its address is another engine or another image store.
# Its address is TORCHIMAGES_CURRENT_ENGINE (default unix:///var/run/torchimages-current.sock).
#   usage: start-current-engine.sh [FOLDER]   (the folder install-current-engine.sh fills; default /opt/torchimages-engine-current)
set -euo pipefail
folder="${1:-/opt/torchimages-engine-current}"
address=${TORCHIMAGES_CURRENT_ENGINE:-unix:///var/run/torchimages-current.sock}
socket=${address#unix://}
root=/var/lib/torchimages-current-docker
exec_root=/var/run/torchimages-current-docker
pidfile=/var/run/torchimages-current-docker.pid
bridge=ticur0
subnet=172.30.232.1/24
log=/tmp/dockerd-current.log
wait_s=${DOCKERD_WAIT:-60}
docker="${folder}/usr/bin/docker"

answers() { DOCKER_HOST="unix://${socket}" timeout 5 "${docker}" version --format '{{.Server.Version}}' > /dev/null 2>&1; }
store_of() { DOCKER_HOST="unix://${socket}" "${docker}" info --format '{{range .DriverStatus}}{{index . 0}}={{index . 1}} {{end}}'; }
containerd_store() {
    local version
    version=$(DOCKER_HOST="unix://${socket}" "${docker}" version --format '{{.Server.Version}}')
    case "$(store_of)" in
        *driver-type=io.containerd.snapshotter.v1*)
            echo "current engine: answering at unix://${socket}: dockerd ${version}, the containerd image store" ;;
        *) echo "current engine: FAILED: the engine at unix://${socket} is dockerd ${version} without the containerd" \
               "image store ($(store_of)); stop it (kill \$(cat ${pidfile})) and run this again" >&2; return 1 ;;
    esac
}

bash "$(dirname "$0")/install-current-engine.sh" "${folder}"
if answers; then
    containerd_store
    exit
fi
if ! ip link show "${bridge}" > /dev/null 2>&1; then
    ip link add name "${bridge}" type bridge
    ip addr add "${subnet}" dev "${bridge}"
fi
ip link set "${bridge}" up
if [ -f "${pidfile}" ] && ! kill -0 "$(cat "${pidfile}")" 2> /dev/null; then
    rm -f "${pidfile}"
fi
mkdir -p "${exec_root}"
# A configuration of its own (never the first engine's /etc/docker/daemon.json): the containerd image store
echo '{"features": {"containerd-snapshotter": true}}' > "${exec_root}.json"
echo "current engine: starting dockerd at unix://${socket} (data root ${root}; log: ${log})"
PATH="${folder}/usr/bin:${folder}/usr/sbin:${PATH}" setsid nohup "${folder}/usr/sbin/dockerd" --host "unix://${socket}" \
    --data-root "${root}" --exec-root "${exec_root}" --pidfile "${pidfile}" --bridge "${bridge}" \
    --config-file "${exec_root}.json" > "${log}" 2>&1 < /dev/null &
for _ in $(seq "${wait_s}"); do
    if answers; then
        containerd_store
        exit
    fi
    sleep 1
done
echo "current engine: FAILED: dockerd did not answer at unix://${socket} within ${wait_s} s; last lines of ${log}:" >&2
tail -20 "${log}" >&2 || true
exit 1
