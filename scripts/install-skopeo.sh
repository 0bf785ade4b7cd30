#!/usr/bin/env bash
# skopeo, the verifier of signatures this project did not write, for the tests and for trying a release's signatures
# locally. Debian bookworm's skopeo 1.9.3 is built without sigstore ("Debian-local change: sigstore disabled"), and
# trixie's 1.18 needs glibc 2.38; so trixie's skopeo runs in a trixie chroot made with debootstrap (which checks the
# mirror's signed Release file), under .cache/skopeo/root, and .cache/skopeo/skopeo runs it there with /tmp shared:
# every path given to it (policy, registries.d, certificates, keys) must be under /tmp.
#   scripts/install-skopeo.sh        (prints the wrapper's path)
set -euo pipefail
cd "$(dirname "$0")/.."
folder=${PWD}/.cache/skopeo
root=${folder}/root
wrapper=${folder}/skopeo
if [ -x "${root}/usr/bin/skopeo" ] && [ -x "${wrapper}" ]; then
    echo "${wrapper}"
    exit 0
fi
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2> /dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
if ! command -v debootstrap > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap > /dev/null
fi
rm -rf "${root}"
mkdir -p "${folder}"
log=${folder}/install.log
started=$(date +%s)
debootstrap --variant=minbase trixie "${root}" "${mirror}" > "${log}" 2>&1 \
    || { echo "skopeo: FAILED: debootstrap trixie; see ${log}" >&2; tail -20 "${log}" >&2; exit 1; }
chroot "${root}" /bin/sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends skopeo ca-certificates" >> "${log}" 2>&1 \
    || { echo "skopeo: FAILED: apt-get install skopeo in the trixie chroot; see ${log}" >&2; tail -20 "${log}" >&2; exit 1; }
rm -rf "${root}"/var/cache/apt/archives/*.deb "${root}"/var/lib/apt/lists/*
cat > "${wrapper}" << WRAPPER
#!/bin/sh
# trixie's skopeo in its chroot, with the host's /tmp (a private mount namespace: the bind ends with the command)
exec unshare --mount --propagation private sh -c 'mount --rbind /tmp "\$0/tmp" && exec chroot "\$0" /usr/bin/skopeo "\$@"' \\
    "${root}" "\$@"
WRAPPER
chmod 755 "${wrapper}"
"${wrapper}" --version > /dev/null || { echo "skopeo: FAILED: ${wrapper} does not run" >&2; exit 1; }
echo "skopeo: $("${wrapper}" --version) in ${root}, made in $(( $(date +%s) - started )) s" >&2
echo "${wrapper}"
