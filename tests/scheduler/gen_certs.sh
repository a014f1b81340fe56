#!/bin/sh
# Throwaway TLS material for the tests, in DIR: a CA (ca.pem), a server
# certificate it signed for 127.0.0.1 and localhost (server.pem,
# server.key, mode 600), and a second CA that signed nothing of ours
# (other-ca.pem), for the "wrong CA" cases. For the certificate checks and
# reloads, with server.key: expired.pem (2020-01-01 to 01-02), future.pem
# (valid from 2099), elsewhere.pem (for elsewhere.example only), soon.pem
# (expires in 10 days); and a renewal with a key of its own (renewed.pem,
# renewed.key). Needs the openssl CLI.
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
# Certificates of any dates: `openssl ca` with a throwaway database.
printf '[ca]\ndefault_ca = d\n[d]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial.txt\ndefault_md = sha256\npolicy = p\nunique_subject = no\n[p]\ncommonName = supplied\n' > ca.cnf
: > index.txt
echo 1000 > serial.txt
sign() { # out, csr, ext, openssl ca date options...
  out=$1 csr=$2 ext=$3
  shift 3
  q openssl ca -config ca.cnf -batch -notext -in "$csr" -out "$out" \
    -cert ca.pem -keyfile ca.key -extfile "$ext" "$@"
}
sign expired.pem server.csr server.ext -startdate 20200101000000Z -enddate 20200102000000Z
sign future.pem server.csr server.ext -startdate 20990101000000Z -enddate 20991231000000Z
sign soon.pem server.csr server.ext -days 10
q openssl req -new -key server.key -out elsewhere.csr -subj "/CN=elsewhere.example"
printf 'subjectAltName=DNS:elsewhere.example\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > elsewhere.ext
sign elsewhere.pem elsewhere.csr elsewhere.ext -days 2
q openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout renewed.key -out renewed.csr -subj "/CN=127.0.0.1"
sign renewed.pem renewed.csr server.ext -days 5
chmod 644 ca.pem server.pem other-ca.pem expired.pem future.pem soon.pem \
  elsewhere.pem renewed.pem
chmod 600 server.key renewed.key
