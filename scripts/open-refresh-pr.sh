#!/usr/bin/env bash
# Open a pull request with what the weekly refresh changed (compat data, matrix.lock, images/); nothing when it
# changed nothing. Usage: open-refresh-pr.sh SUMMARY_FILE BRANCH. Needs GH_TOKEN and GITHUB_REPOSITORY (Actions).
# Every input is checked before anything is committed or pushed, and the token never appears on a command line
# (a process listing or a logged command would show it): git reads it from a credential helper, from the environment.
set -euo pipefail
summary=${1:?summary file}
branch=${2:?branch name}
fail() { echo "refresh: $*" >&2; exit 2; }
[ -f "${summary}" ] && [ -s "${summary}" ] || fail "the summary ${summary} is missing or empty: compat refresh writes it"
git check-ref-format --branch "${branch}" > /dev/null 2>&1 || fail "${branch@Q} is not a branch name"
[ -n "${GH_TOKEN:-}" ] || fail "GH_TOKEN is not set"
repository=${GITHUB_REPOSITORY:-}
[[ "${repository}" =~ ^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$ ]] || fail "GITHUB_REPOSITORY ${repository@Q} is not OWNER/NAME"
if [ -z "$(git status --porcelain -- torchimages/data matrix.lock images)" ]; then
    echo "refresh: nothing changed; no pull request"
    exit 0
fi
git config user.name "torchimages refresh"
git config user.email "torchimages-refresh@users.noreply.github.com"
git switch -c "${branch}"
for path in torchimages/data matrix.lock images; do
    if [ -e "${path}" ]; then git add -- "${path}"; fi
done
git commit -q -m "Weekly refresh: compatibility data and base image pins" -m "$(cat "${summary}")"
# The helper is text for git's shell: ${GH_TOKEN} is expanded when git asks, never placed in an argument.
# shellcheck disable=SC2016
git -c credential.helper= -c 'credential.helper=!f() { echo username=x-access-token; echo "password=${GH_TOKEN}"; }; f' \
    push -q "https://github.com/${repository}.git" "HEAD:refs/heads/${branch}"
{
    echo "The weekly refresh (\`build.py compat refresh\`, \`build.py lock --refresh\`) changed the files below."
    echo "Review the diff like code: rows it adds mark GPU archs and domain-library pairs UNCONFIRMED."
    echo
    echo '```'
    cat "${summary}"
    echo '```'
} > pr-body.md
gh pr create --head "${branch}" --title "Weekly refresh: compatibility data and base image pins" --body-file pr-body.md
