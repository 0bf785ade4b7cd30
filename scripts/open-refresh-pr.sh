#!/usr/bin/env bash
# Open a pull request with what the weekly refresh changed (compat data, matrix.lock, images/); nothing when it
# changed nothing. Usage: open-refresh-pr.sh SUMMARY_FILE BRANCH. Needs GH_TOKEN and GITHUB_REPOSITORY (Actions).
set -euo pipefail
summary=${1:?summary file}
branch=${2:?branch name}
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
git push -q "https://x-access-token:${GH_TOKEN}@github.com/${GITHUB_REPOSITORY}.git" "HEAD:refs/heads/${branch}"
{
    echo "The weekly refresh (\`build.py compat refresh\`, \`build.py lock --refresh\`) changed the files below."
    echo "Review the diff like code: rows it adds mark GPU archs and domain-library pairs UNCONFIRMED."
    echo
    echo '```'
    cat "${summary}"
    echo '```'
} > pr-body.md
gh pr create --head "${branch}" --title "Weekly refresh: compatibility data and base image pins" --body-file pr-body.md
