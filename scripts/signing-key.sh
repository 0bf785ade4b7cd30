#!/usr/bin/env bash
# The release workflow's signing key: the secret SIGNING_KEY (a PEM private key, build.py keygen) written to a file
# only this user reads, outside the workspace, and named in TORCHIMAGES_SIGN_KEY for the later steps (push attests,
# promote signs). Without the secret the release is built and promoted unsigned, and this says so.
set -euo pipefail
if [ -z "${SIGNING_KEY:-}" ]; then
    echo "signing-key: no SIGNING_KEY secret: the release is not signed or attested"
    exit 0
fi
folder=$(mktemp -d)
umask 077
printf '%s\n' "${SIGNING_KEY}" > "${folder}/cosign.key"
echo "TORCHIMAGES_SIGN_KEY=${folder}/cosign.key" >> "${GITHUB_ENV:?GITHUB_ENV is not set: run this as a workflow step}"
echo "signing-key: the release is signed and attested with the SIGNING_KEY secret"
