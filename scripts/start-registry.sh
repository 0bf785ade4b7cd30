#!/usr/bin/env bash
# Start a private registry (Debian's docker-registry, distribution 2.8) on 127.0.0.1:PORT with
# htpasswd auth and TLS from a CA made here; the engine trusts the CA through its certs.d folder.
# For tests and for trying the publish steps locally. The password comes on standard input, never on a
# command line (where ps shows it to every user of the machine):
#   printf '%s\n' "$PASSWORD" | scripts/start-registry.sh DIR [PORT] [USER]
# Stop it with: kill "$(cat DIR/registry.pid)"
set -euo pipefail
usage="usage: printf '%s\\n' \"\$PASSWORD\" | start-registry.sh DIR [PORT] [USER]"
dir=${1:?${usage}}
port=${2:-5443}
user=${3:-ci}
if [ -t 0 ]; then
    echo "start-registry.sh: give the password on standard input; ${usage}" >&2
    exit 2
fi
password=""
IFS= read -r password || true   # the last line may lack its newline
password=${password%$'\r'}
if [ -z "${password}" ]; then
    echo "start-registry.sh: the password on standard input is empty; ${usage}" >&2
    exit 2
fi
if ! command -v docker-registry > /dev/null || ! command -v htpasswd > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker-registry apache2-utils > /dev/null
fi
mkdir -p "${dir}/data"
cd "${dir}"
if [ ! -f ca.crt ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=torchimages test CA" \
        -keyout ca.key -out ca.crt 2> /dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout server.key -out server.csr 2> /dev/null
    # Go ignores the CN: the address must be a subjectAltName.
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile san.ext \
        -out server.crt 2> /dev/null
fi
htpasswd -iBn "${user}" <<< "${password}" > htpasswd   # -i: from stdin; bcrypt: distribution accepts nothing else
cat > config.yml << CONFIG
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: ${PWD}/data}, delete: {enabled: true}}
http:
  addr: 127.0.0.1:${port}
  secret: $(openssl rand -hex 16)
  tls: {certificate: ${PWD}/server.crt, key: ${PWD}/server.key}
auth:
  htpasswd: {realm: torchimages, path: ${PWD}/htpasswd}
CONFIG
install -D -m 0644 ca.crt "/etc/docker/certs.d/127.0.0.1:${port}/ca.crt"
setsid nohup docker-registry serve config.yml > registry.log 2>&1 < /dev/null &
echo $! > registry.pid
for _ in $(seq 50); do
    if curl -s -o /dev/null --cacert ca.crt "https://127.0.0.1:${port}/v2/"; then
        echo "registry: https://127.0.0.1:${port} (user ${user}; CA ${PWD}/ca.crt; pid $(cat registry.pid))"
        exit 0
    fi
    sleep 0.2
done
echo "registry: FAILED to start; log:" >&2
cat registry.log >&2
exit 1
