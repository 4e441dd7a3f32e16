#!/bin/sh
# Entrypoint of the fleet's PostgreSQL image (sandboxd/fleet-postgres:dev).
# Runs as the postgres user (the image's USER), never as root.
#
# On first start, when $PGDATA holds no cluster, it
#   - initialises one (initdb: UTF-8, C.UTF-8, superuser postgres reachable
#     only through the Unix socket in the container, by peer authentication),
#   - creates the role $POSTGRES_USER (default sandboxd) with the password in
#     $POSTGRES_PASSWORD_FILE, and the database $POSTGRES_DB (default
#     sandboxd) owned by it,
#   - accepts TCP connections from any address with that password
#     (scram-sha-256): the container's network is the private network.
# Then, and on every later start, it runs postgres in the foreground with
# the arguments given (e.g. -c max_connections=250).
set -eu

: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=sandboxd}"
: "${POSTGRES_DB:=sandboxd}"
export PGDATA

if [ "${1:-postgres}" != postgres ]; then
	exec "$@"
fi
[ $# -eq 0 ] || shift

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	[ -r "${POSTGRES_PASSWORD_FILE:-}" ] || {
		echo "entrypoint: POSTGRES_PASSWORD_FILE must name a readable file holding the password of $POSTGRES_USER" >&2
		exit 1
	}
	[ -s "$POSTGRES_PASSWORD_FILE" ] || { echo "entrypoint: $POSTGRES_PASSWORD_FILE is empty" >&2; exit 1; }
	echo "entrypoint: initialising a cluster in $PGDATA" >&2
	initdb --pgdata="$PGDATA" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
		--auth-local=peer --auth-host=scram-sha-256 >/dev/null
	{
		echo
		echo "# The container's network is a private one: every address, with a password."
		echo "host all all 0.0.0.0/0 scram-sha-256"
		echo "host all all ::/0 scram-sha-256"
	} >>"$PGDATA/pg_hba.conf"
	{
		echo
		echo "# Set by the image's entrypoint."
		echo "listen_addresses = '*'"
		echo "unix_socket_directories = '/run/postgresql'"
		echo "jit = off"
		echo "log_timezone = 'UTC'"
		echo "timezone = 'UTC'"
	} >>"$PGDATA/postgresql.conf"
	# The role and database, on a server that listens on its socket only.
	pg_ctl start --pgdata="$PGDATA" --silent --wait -o "-c listen_addresses=''" >/dev/null
	# psql reads the password from the file itself (not from its arguments).
	psql -X -q -v ON_ERROR_STOP=1 -h /run/postgresql -U postgres -d postgres \
		-v user="$POSTGRES_USER" -v db="$POSTGRES_DB" <<'SQL'
\set pw `cat "$POSTGRES_PASSWORD_FILE"`
CREATE ROLE :"user" LOGIN PASSWORD :'pw';
CREATE DATABASE :"db" OWNER :"user";
SQL
	pg_ctl stop --pgdata="$PGDATA" --silent --wait --mode=fast
	echo "entrypoint: created role $POSTGRES_USER and database $POSTGRES_DB" >&2
fi

exec postgres "$@"
