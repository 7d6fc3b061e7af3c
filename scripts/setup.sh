#!/usr/bin/env bash
# Installs the system programs the README's commands use, on Debian, when they are missing:
# `setup.sh main` what the main job needs (fio, the plots' font), `setup.sh test` what the tests
# run (also etcd, PostgreSQL 15's server and clients, chromium, perf, sysbench, a JDK, Maven, Go). As root it installs them with
# apt-get; otherwise it names the packages to install and goes on (the tests that need a missing
# program say SKIPPED, or fail under CI: nvmedb_testkit::needs). The build itself needs no
# system tool: protoc comes from a crate (scripts/protoc). Rust (cargo) must be installed.
set -euo pipefail
what="${1:-test}"
command -v cargo >/dev/null 2>&1 || { echo "cargo is missing: install Rust (rustup, stable >= 1.89) first" >&2; exit 1; }

missing=()
need() { # need PACKAGE TEST...: PACKAGE is missing when any TEST fails
  local pkg="$1"; shift
  for t in "$@"; do
    if ! eval "$t" >/dev/null 2>&1; then missing+=("$pkg"); return; fi
  done
}
need fio "command -v fio"
need fonts-dejavu-core "[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || [ -n \"${NVMEDB_PLOT_FONT:-}\" ]"
if [ "$what" = test ]; then
  need etcd-server "command -v etcd"
  need postgresql-15 "[ -x /usr/lib/postgresql/15/bin/pgbench ]"
  need postgresql-client-15 "[ -x /usr/lib/postgresql/15/bin/psql ]"
  need chromium "command -v chromium"
  need linux-perf "command -v perf"
  need sysbench "command -v sysbench"
  need openssl "command -v openssl"
  # The JDBC and Go client tests: a JDK and Maven (which fetches pgjdbc), and Go (which fetches
  # pgx from the module proxy; it needs Go >= 1.25, newer than Debian 12's golang-go).
  need default-jdk-headless "command -v java"
  need maven "command -v mvn"
  need golang-go "command -v go"
fi

# The Python PostgreSQL drivers and ORM the client tests drive (PyPI: psycopg2, psycopg 3 and
# SQLAlchemy 2 are newer there than in Debian 12). pip needs python3-pip, installed above.
pydrivers_missing() { ! python3 -c 'import psycopg2, psycopg, sqlalchemy' >/dev/null 2>&1; }
if [ "$what" = test ] && pydrivers_missing; then
  need python3-pip "command -v pip3"
fi
install_pydrivers() {
  if [ "$what" = test ] && pydrivers_missing; then
    if [ "$(id -u)" = 0 ] && command -v pip3 >/dev/null 2>&1; then
      echo "installing psycopg2-binary, psycopg[binary], sqlalchemy (pip3)" >&2
      pip3 install --quiet --break-system-packages psycopg2-binary 'psycopg[binary]' 'sqlalchemy>=2'
    else
      echo "not installed: the Python drivers (pip3 install --break-system-packages psycopg2-binary 'psycopg[binary]' sqlalchemy); the tests that need them say SKIPPED" >&2
    fi
  fi
}
trap install_pydrivers EXIT

[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "not installed: ${missing[*]} (Debian: sudo apt-get install ${missing[*]}); the tests that need them say SKIPPED" >&2
fi
