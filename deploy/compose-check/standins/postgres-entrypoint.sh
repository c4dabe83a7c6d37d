#!/bin/sh
# Entry point of the postgres:15 stand-in (deploy/compose-check/standins/Dockerfile): as the official image, a
# first start with an empty $PGDATA creates the cluster with superuser $POSTGRES_USER (default postgres), its
# password $POSTGRES_PASSWORD (required) and database $POSTGRES_DB (default the user's name); then it runs
# postgres as the postgres user, listening on every address, password logins over TCP.
set -eu
if [ "${1:-}" != postgres ]; then exec "$@"; fi
shift
: "${PGDATA:=/var/lib/postgresql/data}"
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
as_pg() { setpriv --reuid postgres --regid postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres stand-in: POSTGRES_PASSWORD is empty; set it to create the database" >&2
    exit 1
  fi
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  chown postgres "$pwfile"
  as_pg initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE \"$db\" OWNER \"$user\";" | as_pg postgres --single -D "$PGDATA" postgres >/dev/null
  fi
  echo "postgres stand-in: created database $db for user $user"
fi
exec setpriv --reuid postgres --regid postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*' "$@"
