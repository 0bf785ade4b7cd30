#!/usr/bin/env bash
# A current Docker engine beside Debian 12's 20.10 (docs/engines.md): Debian 13's docker.io (dockerd 26), containerd
# and docker-cli, whose binaries need only glibc 2.34 and so run on Debian 12 as they are. Taken from the trixie suite
# of Debian's mirror and checked on the way, as scripts/install-buildx.sh does: the suite's InRelease by its signature
# with Debian's archive keyring, the Packages index by the hash the signed file gives, each .deb by the hash the index
# gives. Unpacked into one folder (default /opt/torchimages-engine-current); nothing else on the machine is changed.
# scripts/start-current-engine.sh starts it.
# Usage: scripts/install-current-engine.sh [FOLDER]        (DEBIAN_MIRROR=URL for another mirror)
set -euo pipefail

mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=trixie
arch="$(dpkg --print-architecture)"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
folder="${1:-/opt/torchimages-engine-current}"
packages=(docker.io containerd docker-cli)

if [ -x "${folder}/usr/sbin/dockerd" ] && "${folder}/usr/sbin/dockerd" --version >/dev/null 2>&1; then
  echo "current engine: $("${folder}/usr/sbin/dockerd" --version) in ${folder}"
  exit 0
fi
for tool in curl gpgv xz dpkg-deb sha256sum; do
  command -v "${tool}" >/dev/null || { echo "install-current-engine: ${tool} is missing" >&2; exit 1; }
done
[ -f "${keyring}" ] || { echo "install-current-engine: no ${keyring} (apt-get install debian-archive-keyring)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
fetch() { curl -fsS --retry 3 --connect-timeout 20 -o "$2" "${mirror}/$1"; }
check() {  # check SHA256 FILE WHAT
  echo "$1  $2" | sha256sum --check --quiet - || { echo "install-current-engine: $3 does not match its hash" >&2; exit 1; }
}

fetch "dists/${suite}/InRelease" "${tmp}/InRelease"
if ! gpgv --keyring "${keyring}" --output "${tmp}/Release" "${tmp}/InRelease" 2>"${tmp}/gpgv.log"; then
  cat "${tmp}/gpgv.log" >&2
  echo "install-current-engine: ${mirror}/dists/${suite}/InRelease is not signed by a key of ${keyring}" >&2
  exit 1
fi
index="main/binary-${arch}/Packages.xz"
index_sha="$(awk -v f="${index}" '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1}' "${tmp}/Release")"
[ -n "${index_sha}" ] || { echo "install-current-engine: ${index} is not in the signed Release file" >&2; exit 1; }
fetch "dists/${suite}/${index}" "${tmp}/Packages.xz"
check "${index_sha}" "${tmp}/Packages.xz" "${index}"
xz -dc "${tmp}/Packages.xz" >"${tmp}/Packages"  # not piped: awk's early exit would fail xz under pipefail

mkdir -p "${tmp}/root"
versions=()
for package in "${packages[@]}"; do
  stanza="$(awk -v p="Package: ${package}" '$0 == p {f=1} f && /^$/ {exit} f' "${tmp}/Packages")"
  filename="$(sed -n 's/^Filename: //p' <<<"${stanza}")"
  deb_sha="$(sed -n 's/^SHA256: //p' <<<"${stanza}")"
  [ -n "${filename}" ] && [ -n "${deb_sha}" ] || { echo "install-current-engine: no ${package} in ${suite}" >&2; exit 1; }
  fetch "${filename}" "${tmp}/${package}.deb"
  check "${deb_sha}" "${tmp}/${package}.deb" "${filename}"
  dpkg-deb -x "${tmp}/${package}.deb" "${tmp}/root"
  versions+=("${package} $(sed -n 's/^Version: //p' <<<"${stanza}")")
done
mkdir -p "$(dirname "${folder}")"
rm -rf "${folder}"
mv "${tmp}/root" "${folder}"
echo "current engine: Debian ${suite}'s $(IFS=,; echo "${versions[*]}" | sed 's/,/, /g') in ${folder}:" \
     "$("${folder}/usr/sbin/dockerd" --version)"
