#!/bin/sh
# Throwaway TLS material for the tests, in DIR: a CA (ca.pem), a server
# certificate it signed for 127.0.0.1 and localhost (server.pem,
# server.key, mode 600), and a second CA that signed nothing of ours
# (other-ca.pem), for the "wrong CA" cases. Needs the openssl CLI.
set -eu
dir=$1
cd "$dir"
umask 077
q() { "$@" >/dev/null 2>&1 || { echo "gen_certs: $1 failed: $*" >&2; exit 1; }; }
q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout ca.key -out ca.pem -days 2 -subj "/CN=flps test CA" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign
q openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout server.key -out server.csr -subj "/CN=127.0.0.1"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > server.ext
q openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
  -out server.pem -days 2 -extfile server.ext
q openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout other-ca.key -out other-ca.pem -days 2 -subj "/CN=another CA"
chmod 644 ca.pem server.pem other-ca.pem
chmod 600 server.key
