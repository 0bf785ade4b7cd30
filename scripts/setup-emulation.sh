#!/usr/bin/env bash
# Run linux/arm64 containers on an x86_64 machine: QEMU's user-mode emulator, registered with the kernel's
# binfmt_misc with the F flag (the kernel opens the emulator once, so no container needs one inside it).
# Debian trixie's qemu 10 (package qemu-user: a static-pie /usr/bin/qemu-aarch64) is used: bookworm's
# qemu-user-static 7.2 dies on `import torch` (aarch64, 2.14: "qemu: uncaught target signal 11"). Needs root.
# Idempotent; says clearly when it cannot.
#   scripts/setup-emulation.sh
set -euo pipefail
if [ "$(uname -m)" != x86_64 ]; then
    echo "emulation: this machine is $(uname -m); nothing to set up (build its own platform natively)"
    exit 0
fi
fail() { echo "emulation: FAILED: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (binfmt_misc registration)"
exec 9> /tmp/torchimages-emulation.lock
flock 9   # the test session's lanes may set it up at once: one registers, the other finds it done
qemu=/opt/torchimages/qemu/qemu-aarch64
if [ ! -x "${qemu}" ]; then
    mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2> /dev/null || true)}
    mirror=${mirror:-http://deb.debian.org/debian}
    work=$(mktemp -d)
    trap 'rm -rf "${work}"' EXIT
    mkdir -p "${work}/parts" "${work}/lists/partial" "${work}/archives/partial"
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "${mirror}" > "${work}/parts/trixie.sources"
    apt=(apt-get -q -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=${work}/parts"
         -o "Dir::State::Lists=${work}/lists" -o "Dir::Cache::Archives=${work}/archives" -o Dir::Cache::pkgcache=
         -o Dir::Cache::srcpkgcache=)
    "${apt[@]}" update > "${work}/apt.log" 2>&1 || { cat "${work}/apt.log" >&2; fail "apt could not read trixie from ${mirror}"; }
    (cd "${work}" && "${apt[@]}" download qemu-user > "${work}/apt.log" 2>&1) \
        || { cat "${work}/apt.log" >&2; fail "no qemu-user package in trixie at ${mirror}"; }
    dpkg-deb -x "${work}"/qemu-user_*.deb "${work}/root"
    install -D -m 0755 "${work}/root/usr/bin/qemu-aarch64" "${qemu}"
fi
echo "emulation: $("${qemu}" --version | head -1) at ${qemu}"
binfmt=/proc/sys/fs/binfmt_misc
mountpoint -q "${binfmt}" || mount -t binfmt_misc binfmt_misc "${binfmt}" || fail "cannot mount ${binfmt}"
handler="${binfmt}/qemu-aarch64"
if [ -e "${handler}" ] && ! grep -qx "interpreter ${qemu}" "${handler}"; then
    echo -1 > "${handler}"  # another emulator (bookworm's 7.2 crashes on torch): replaced by this one
fi
if [ ! -e "${handler}" ]; then
    # The ELF header of an aarch64 executable, and the mask of the bytes that must match (binfmt_misc's format)
    magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
    mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
    echo ":qemu-aarch64:M::${magic}:${mask}:${qemu}:FP" > "${binfmt}/register" || fail "the kernel refused the registration"
fi
grep -q "^flags: .*F" "${handler}" || fail "${handler} is registered without the F flag: containers would not find ${qemu}"
echo "emulation: linux/arm64 binaries run through ${qemu} ($(grep '^flags' "${handler}"))"
