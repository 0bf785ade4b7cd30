#!/usr/bin/env bash
# Start the current Docker engine (dockerd 26 from scripts/install-current-engine.sh) with the containerd image store,
# as Docker 29 installs by default and Docker Desktop runs, beside the 20.10 engine(s) here (docs/engines.md). Its own
# configuration (the containerd-snapshotter feature), socket, data root, exec root, pid file, containerd (the
# packaged 1.7, which dockerd starts from PATH) and bridge: never `--bridge none`, which deletes another engine's
# docker0. It reaches Debian's mirror like the first. Exits non-zero, loudly, if it never answers or uses another
# image store. Its address is TORCHIMAGES_CURRENT_ENGINE (default unix:///var/run/torchimages-current.sock).
#   usage: start-current-engine.sh [FOLDER]   (the folder install-current-engine.sh filled)
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
    case "$(store_of)" in
        *driver-type=io.containerd.snapshotter.v1*) echo "current engine: answering at unix://${socket}:" \
            "dockerd $(DOCKER_HOST="unix://${socket}" "${docker}" version --format '{{.Server.Version}}'), the containerd image store" ;;
        *) echo "current engine: FAILED: the engine at unix://${socket} does not use the containerd image store:" \
            "$(store_of)" >&2; return 1 ;;
    esac
}

[ -x "${folder}/usr/sbin/dockerd" ] || {
    echo "current engine: FAILED: no dockerd in ${folder}; run scripts/install-current-engine.sh first" >&2; exit 1; }
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
echo '{"features": {"containerd-snapshotter": true}}' > "${exec_root}.json"
echo "current engine: starting dockerd 26 at unix://${socket} (data root ${root}; log: ${log})"
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
