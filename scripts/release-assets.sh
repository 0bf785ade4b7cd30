#!/usr/bin/env bash
# The release manifest of each release travels as an asset of its GitHub release (RELEASE-manifest.tar.gz: the
# manifest JSON and Markdown, its SBOM folder, its wheel locks and the diff against the release before), so the next release can
# reuse unchanged images (--cache-from previous), hold its sizes to the budget (--previous) and print its diff.
#
#   release-assets.sh previous RELEASE DIR   the latest published release other than RELEASE: its manifest into DIR;
#                                            with GITHUB_ENV set, TORCHIMAGES_PREVIOUS and TORCHIMAGES_CACHE_FROM are
#                                            written there for the later steps. No previous release: a note, exit 0.
#   release-assets.sh publish RELEASE        releases/RELEASE-diff.md against releases/previous/ (when there is one),
#                                            then the GitHub release RELEASE with the tarball, the diff and the host
#                                            index (RELEASE-hosts.json: each tag's platforms, versions, GPU generations
#                                            and driver) as its assets.
# Needs gh (GH_TOKEN) and the python of .venv (PYTHON), which also says what a release tag is (the code's own rule).
set -euo pipefail
usage="usage: release-assets.sh previous RELEASE DIR | publish RELEASE"
command=${1:?${usage}}
release=${2:?${usage}}
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-${root}/.venv/bin/python}

# gh's own words for "there is none", as opposed to a download that failed (401, network): that fails the job,
# since building without the previous release would silently drop the size budget and the reuse.
NOT_FOUND="release not found"
NO_ASSET="no assets match the file pattern"

previous() {
    local dir=${1:?${usage}} tag said
    gh_errors=$(mktemp)  # global: the EXIT trap runs after this function's locals are gone
    trap 'rm -f "${gh_errors}"' EXIT
    if ! tag=$(gh release view --json tagName --jq .tagName 2> "${gh_errors}"); then
        said=$(cat "${gh_errors}")
        if [[ "${said}" == *"${NOT_FOUND}"* ]]; then
            echo "release-assets: no published release yet: ${release} is built without a previous one"
            return 0
        fi
        echo "release-assets: FAILED: could not ask GitHub for the latest release: ${said}" >&2
        exit 1
    fi
    if [ -z "${tag}" ]; then
        echo "release-assets: no published release yet: ${release} is built without a previous one"
        return 0
    fi
    if [ "${tag}" = "${release}" ]; then
        echo "release-assets: ${release} is already the latest release: nothing earlier to compare with"
        return 0
    fi
    if ! PYTHONPATH="${root}" "${python}" -m torchimages.input.grammar release "${tag}" 2> /dev/null; then
        echo "release-assets: FAILED: the latest release's tag ${tag@Q} is not a release tag" >&2
        exit 1
    fi
    mkdir -p "${dir}"
    if ! gh release download "${tag}" --pattern "${tag}-manifest.tar.gz" --dir "${dir}" --clobber 2> "${gh_errors}"; then
        said=$(cat "${gh_errors}")
        if [[ "${said}" == *"${NO_ASSET}"* ]]; then
            echo "release-assets: release ${tag} has no ${tag}-manifest.tar.gz: ${release} is built without a previous one"
            return 0
        fi
        echo "release-assets: FAILED: downloading ${tag}-manifest.tar.gz: ${said}" >&2
        exit 1
    fi
    check_members "${dir}/${tag}-manifest.tar.gz" "${tag}"
    tar -xzf "${dir}/${tag}-manifest.tar.gz" -C "${dir}" --no-same-owner --no-same-permissions
    test -f "${dir}/${tag}.json" || { echo "release-assets: ${tag}-manifest.tar.gz holds no ${tag}.json" >&2; exit 1; }
    echo "${tag}" > "${dir}/RELEASE"
    echo "release-assets: previous release ${tag}: ${dir}/${tag}.json"
    if [ -n "${GITHUB_ENV:-}" ]; then
        { echo "TORCHIMAGES_PREVIOUS=${dir}/${tag}.json"; echo "TORCHIMAGES_CACHE_FROM=previous"; } >> "${GITHUB_ENV}"
    fi
}

# A downloaded tarball is input: only plain files and folders, named as publish names them (TAG.json, TAG.md,
# TAG-diff.md, TAG.sbom/IMAGE.spdx.json, TAG.wheels/IMAGE.txt), are extracted; a link, a device, an absolute path or '..' refuses it all.
check_members() {
    local tarball=$1 tag=$2 line name
    while IFS= read -r line; do  # tar -tv: the first character is the member's type (- file, d folder, l link, ...)
        case "${line:0:1}" in
            -|d) ;;
            *) echo "release-assets: FAILED: ${tarball} holds a member that is not a file or folder: ${line}" >&2; exit 1 ;;
        esac
    done < <(tar -tvzf "${tarball}")
    while IFS= read -r name; do
        case "${name}" in
            "${tag}.json"|"${tag}.md"|"${tag}-diff.md"|"${tag}.sbom"|"${tag}.sbom/"|"${tag}.wheels"|"${tag}.wheels/") ;;
            "${tag}.sbom/"*.spdx.json)
                [[ "${name}" != *..* && "${name#"${tag}.sbom/"}" != */* ]] || {
                    echo "release-assets: FAILED: ${tarball}: member ${name@Q} leaves its folder" >&2; exit 1; } ;;
            "${tag}.wheels/"*.txt)
                [[ "${name}" != *..* && "${name#"${tag}.wheels/"}" != */* ]] || {
                    echo "release-assets: FAILED: ${tarball}: member ${name@Q} leaves its folder" >&2; exit 1; } ;;
            *) echo "release-assets: FAILED: ${tarball}: unexpected member ${name@Q}" >&2; exit 1 ;;
        esac
    done < <(tar -tzf "${tarball}")
}

publish() {
    local manifest="releases/${release}.json" notes="releases/${release}-diff.md" files
    test -f "${manifest}" || { echo "release-assets: no ${manifest}: promote writes it" >&2; exit 1; }
    if [ -f releases/previous/RELEASE ]; then
        local before
        before=$(cat releases/previous/RELEASE)
        "${python}" build.py diff "releases/previous/${before}.json" "${manifest}" > "${notes}"
    else
        printf '# %s\n\nThe first release: nothing to compare with.\n' "${release}" > "${notes}"
    fi
    files=("${release}.json" "${release}-diff.md")
    [ -f "releases/${release}.md" ] && files+=("${release}.md")
    [ -d "releases/${release}.sbom" ] && files+=("${release}.sbom")
    [ -d "releases/${release}.wheels" ] && files+=("${release}.wheels")
    tar -czf "releases/${release}-manifest.tar.gz" -C releases "${files[@]}"
    if ! gh release view "${release}" > /dev/null 2>&1; then
        gh release create "${release}" --verify-tag --title "${release}" --notes-file "${notes}"
    fi
    local hosts=()
    [ -f "releases/${release}-hosts.json" ] && hosts=("releases/${release}-hosts.json")
    gh release upload "${release}" "releases/${release}-manifest.tar.gz" "${notes}" "${hosts[@]}" --clobber
    echo "release-assets: ${release}: manifest, SBOMs, diff and host index attached to its GitHub release"
}

case "${command}" in
    previous) previous "${3:-}" ;;
    publish) publish ;;
    *) echo "${usage}" >&2; exit 2 ;;
esac
