# Sourced by the builder stages' RUN steps (generated from templates/files/network-env.sh).
# It trusts an extra CA bundle and uses a local wheelhouse for this build only: these files
# live in a builder stage and never reach the final image.
# The RUN steps trace their commands (set -x); not while this file runs: it exports index URLs with their tokens
# from the secret, which the trace would print into the build's log whenever the step is not cached.
case "$-" in *x*) network_env_traced=1; set +x ;; *) network_env_traced=0 ;; esac
config=/tmp/build-config
# --builder buildkit hands index URLs and OFFLINE over as a secret file, never as build arguments.
if [ -r /run/secrets/build-env ]; then
    . /run/secrets/build-env
fi
if [ -s "${config}/extra-ca.pem" ]; then
    cat /etc/ssl/certs/ca-certificates.crt "${config}/extra-ca.pem" > "${config}/ca-bundle.pem" 2>/dev/null \
        || cp "${config}/extra-ca.pem" "${config}/ca-bundle.pem"
    export PIP_CERT="${config}/ca-bundle.pem" SSL_CERT_FILE="${config}/ca-bundle.pem"
    export REQUESTS_CA_BUNDLE="${config}/ca-bundle.pem" CURL_CA_BUNDLE="${config}/ca-bundle.pem"
fi
if ls "${config}"/wheelhouse/*.whl > /dev/null 2>&1; then
    export PIP_FIND_LINKS="${config}/wheelhouse" UV_FIND_LINKS="${config}/wheelhouse"
fi
if [ "${OFFLINE:-0}" = 1 ]; then
    export PIP_NO_INDEX=1 UV_OFFLINE=1
fi
if [ -n "${PIP_INDEX_URL:-}" ]; then
    export UV_DEFAULT_INDEX="${PIP_INDEX_URL}"
fi
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Reproducible environment layers: with SOURCE_DATE_EPOCH set (a build argument), pip compiles each installed module
# hash-based (py_compile's default then), so no .pyc holds a build's time; no other Python run here writes a .pyc.
export PYTHONDONTWRITEBYTECODE=1
if [ "${network_env_traced}" = 1 ]; then set -x; fi
