#!/usr/bin/env bash
# The release manifest of each release travels as an asset of its GitHub release (RELEASE-manifest.tar.gz: the
# manifest JSON and Markdown, its SBOM folder and the diff against the release before), so the next release can
# reuse unchanged images (--cache-from previous), hold its sizes to the budget (--previous) and print its diff.
#
#   release-assets.sh previous RELEASE DIR   the latest published release other than RELEASE: its manifest into DIR;
#                                            with GITHUB_ENV set, TORCHIMAGES_PREVIOUS and TORCHIMAGES_CACHE_FROM are
#                                            written there for the later steps. No previous release: a note, exit 0.
#   release-assets.sh publish RELEASE        releases/RELEASE-diff.md against releases/previous/ (when there is one),
#                                            then the GitHub release RELEASE with the tarball as its asset.
# Needs gh (GH_TOKEN) and, for publish, the python of .venv.
set -euo pipefail
usage="usage: release-assets.sh previous RELEASE DIR | publish RELEASE"
command=${1:?${usage}}
release=${2:?${usage}}
python=${PYTHON:-.venv/bin/python}

previous() {
    local dir=${1:?${usage}} tag
    if ! tag=$(gh release view --json tagName --jq .tagName 2> /dev/null) || [ -z "${tag}" ]; then
        echo "release-assets: no published release yet: ${release} is built without a previous one"
        return 0
    fi
    if [ "${tag}" = "${release}" ]; then
        echo "release-assets: ${release} is already the latest release: nothing earlier to compare with"
        return 0
    fi
    mkdir -p "${dir}"
    if ! gh release download "${tag}" --pattern "${tag}-manifest.tar.gz" --dir "${dir}" --clobber; then
        echo "release-assets: release ${tag} has no ${tag}-manifest.tar.gz: ${release} is built without a previous one"
        return 0
    fi
    tar -xzf "${dir}/${tag}-manifest.tar.gz" -C "${dir}"
    test -f "${dir}/${tag}.json" || { echo "release-assets: ${tag}-manifest.tar.gz holds no ${tag}.json" >&2; exit 1; }
    echo "${tag}" > "${dir}/RELEASE"
    echo "release-assets: previous release ${tag}: ${dir}/${tag}.json"
    if [ -n "${GITHUB_ENV:-}" ]; then
        { echo "TORCHIMAGES_PREVIOUS=${dir}/${tag}.json"; echo "TORCHIMAGES_CACHE_FROM=previous"; } >> "${GITHUB_ENV}"
    fi
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
    tar -czf "releases/${release}-manifest.tar.gz" -C releases "${files[@]}"
    if ! gh release view "${release}" > /dev/null 2>&1; then
        gh release create "${release}" --verify-tag --title "${release}" --notes-file "${notes}"
    fi
    gh release upload "${release}" "releases/${release}-manifest.tar.gz" "${notes}" --clobber
    echo "release-assets: ${release}: manifest, SBOMs and diff attached to its GitHub release"
}

case "${command}" in
    previous) previous "${3:-}" ;;
    publish) publish ;;
    *) echo "${usage}" >&2; exit 2 ;;
esac
