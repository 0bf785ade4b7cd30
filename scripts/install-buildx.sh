#!/usr/bin/env bash
# The buildx plugin for the docker CLI, so that `--builder buildkit` drives BuildKit with `docker buildx build` as
# GitHub's hosted runners (ci.yml, release.yml) do. Debian's bookworm has no buildx package: this takes Debian's
# docker-buildx from the trixie suite of Debian's mirror (a static Go program), checked on the way: the suite's
# InRelease by its signature with Debian's archive keyring, the Packages index by the hash the signed file gives,
# the .deb by the hash the index gives. Installed as a user plugin in ${DOCKER_CONFIG:-~/.docker}/cli-plugins
# (a test that needs the CLI without buildx points DOCKER_CONFIG elsewhere); nothing else is changed.
# Usage: scripts/install-buildx.sh        (DEBIAN_MIRROR=URL for another mirror)
set -euo pipefail

mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=trixie
arch="$(dpkg --print-architecture)"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
plugins="${DOCKER_CONFIG:-${HOME}/.docker}/cli-plugins"

if [ -x "${plugins}/docker-buildx" ] && "${plugins}/docker-buildx" version >/dev/null 2>&1; then
  echo "buildx: $("${plugins}/docker-buildx" version) in ${plugins}"
  exit 0
fi
for tool in curl gpgv xz dpkg-deb sha256sum; do
  command -v "${tool}" >/dev/null || { echo "install-buildx: ${tool} is missing" >&2; exit 1; }
done
[ -f "${keyring}" ] || { echo "install-buildx: no ${keyring} (apt-get install debian-archive-keyring)" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
fetch() { curl -fsS --retry 3 --connect-timeout 20 -o "$2" "${mirror}/$1"; }
check() {  # check SHA256 FILE WHAT
  echo "$1  $2" | sha256sum --check --quiet - || { echo "install-buildx: $3 does not match its hash" >&2; exit 1; }
}

fetch "dists/${suite}/InRelease" "${tmp}/InRelease"
if ! gpgv --keyring "${keyring}" --output "${tmp}/Release" "${tmp}/InRelease" 2>"${tmp}/gpgv.log"; then
  cat "${tmp}/gpgv.log" >&2
  echo "install-buildx: ${mirror}/dists/${suite}/InRelease is not signed by a key of ${keyring}" >&2
  exit 1
fi
index="main/binary-${arch}/Packages.xz"
index_sha="$(awk -v f="${index}" '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1}' "${tmp}/Release")"
[ -n "${index_sha}" ] || { echo "install-buildx: ${index} is not in the signed Release file" >&2; exit 1; }
fetch "dists/${suite}/${index}" "${tmp}/Packages.xz"
check "${index_sha}" "${tmp}/Packages.xz" "${index}"

xz -dc "${tmp}/Packages.xz" >"${tmp}/Packages"  # not piped: awk's early exit would fail xz under pipefail
stanza="$(awk '/^Package: docker-buildx$/ {p=1} p && /^$/ {exit} p' "${tmp}/Packages")"
filename="$(sed -n 's/^Filename: //p' <<<"${stanza}")"
deb_sha="$(sed -n 's/^SHA256: //p' <<<"${stanza}")"
version="$(sed -n 's/^Version: //p' <<<"${stanza}")"
[ -n "${filename}" ] && [ -n "${deb_sha}" ] || { echo "install-buildx: no docker-buildx in ${suite}" >&2; exit 1; }
fetch "${filename}" "${tmp}/buildx.deb"
check "${deb_sha}" "${tmp}/buildx.deb" "${filename}"

dpkg-deb -x "${tmp}/buildx.deb" "${tmp}/root"
mkdir -p "${plugins}"
install -m 0755 "${tmp}/root/usr/libexec/docker/cli-plugins/docker-buildx" "${plugins}/docker-buildx"
echo "buildx: Debian's docker-buildx ${version} (${suite}) installed in ${plugins}: $("${plugins}/docker-buildx" version)"
