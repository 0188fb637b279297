#!/usr/bin/env bash
# Makes a local CA and the certificates to run lockgate (and Redis) over TLS,
# with openssl: scripts/make-certs.sh DIR [CLIENT_NAME...]
#
#   DIR/ca.pem, DIR/ca-key.pem          the CA (keep ca-key.pem private)
#   DIR/server.pem, DIR/server-key.pem  the gateway's (and Redis's) certificate,
#                                       for localhost and 127.0.0.1, and the
#                                       names in LOCKGATE_TLS_HOSTS (comma-
#                                       separated DNS names or IP addresses)
#   DIR/NAME.pem, DIR/NAME-key.pem      a client certificate per NAME: its
#                                       subject CN and DNS name are NAME, which
#                                       a permissions file's client_cert names
#
# Then: lockgate serve --tls-cert DIR/server.pem --tls-key DIR/server-key.pem \
#         [--tls-client-ca DIR/ca.pem]
# and:  curl --cacert DIR/ca.pem [--cert DIR/NAME.pem --key DIR/NAME-key.pem] \
#         https://localhost:8080/healthz
# Existing files are kept; delete DIR to start again. Keys are EC P-256.
set -euo pipefail

if [[ $# -lt 1 || $1 == -h || $1 == --help ]]; then
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
dir=$1
shift
days=${LOCKGATE_CERT_DAYS:-825}
mkdir -p "$dir"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [[ ! -f $dir/ca.pem ]]; then
    key "$dir/ca-key.pem"
    openssl req -x509 -new -key "$dir/ca-key.pem" -sha256 -days "$days" \
        -subj "/CN=lockgate local CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$dir/ca.pem"
fi

# signed NAME SUBJECT_ALT_NAMES EXTENDED_KEY_USAGE
signed() {
    local name=$1 alt=$2 usage=$3
    [[ -f $dir/$name.pem ]] && return
    key "$dir/$name-key.pem"
    openssl req -new -key "$dir/$name-key.pem" -subj "/CN=${4:-$name}" -out "$dir/$name.csr"
    printf 'subjectAltName=%s\nextendedKeyUsage=%s\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n' \
        "$alt" "$usage" >"$dir/$name.ext"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
        -CAcreateserial -days "$days" -sha256 -extfile "$dir/$name.ext" \
        -out "$dir/$name.pem" 2>/dev/null
    rm -f "$dir/$name.csr" "$dir/$name.ext"
}

alt="DNS:localhost,IP:127.0.0.1,IP:::1"
IFS=, read -ra hosts <<<"${LOCKGATE_TLS_HOSTS:-}"
for host in "${hosts[@]}"; do
    if [[ $host =~ ^[0-9.]+$ || $host == *:* ]]; then alt+=",IP:$host"; else alt+=",DNS:$host"; fi
done
# The server certificate may also act as a client (Redis's replicas and
# cluster bus present it to each other).
signed server "$alt" "serverAuth,clientAuth" localhost
for name in "$@"; do
    signed "$name" "DNS:$name" clientAuth
done
chmod 644 "$dir"/*.pem
chmod 600 "$dir"/*-key.pem
echo "certificates in $dir: ca.pem server.pem${*:+ $(printf '%s.pem ' "$@")}"
