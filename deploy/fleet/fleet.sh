#!/usr/bin/env bash
# Start and stop the development fleet of docker-compose.yml. Called by
# `make fleet` (after the images are built) and `make fleet-down`.
#
#   fleet.sh up      write the secrets once, start the fleet, wait until the
#                    balancer answers, print the keys the first time
#   fleet.sh down    stop and remove the containers, networks and volumes,
#                    then check that no sandbox container, network or
#                    volume of the replicas is left (and remove any)
#   fleet.sh down --strict   as down, but exit 1 when the replicas left
#                    something behind (make fleet-test)
#   fleet.sh compose ARGS    docker-compose ARGS on the fleet's project, e.g.
#                    ps, logs -f r1, exec r1 sh
#   fleet.sh lb CMD  a command to HAProxy's runtime API, e.g.
#                    'show servers state replicas', 'set server replicas/r2 state maint'
#
# Secrets, made once in .secrets/ (mode 0700; git-ignored) and kept across
# down and up (delete the directory for new ones, after `make fleet-down`):
#   keys.env           the admin and agent keys in plain text (0600)
#   keys.yaml          their sha256 digests, for --keys-file
#   fleet.key          the fleet's shared secret (--fleet-key-file)
#   postgres-password  the database password; pgpass says it to the replicas
#   s3.json, s3.env    the S3 server's identity, and the same credentials
#                      for the replicas' environment (0600)
# The files a container reads are 0644: the containers run as their own
# users (sandboxd 10001, postgres, seaweedfs 10002) and a bind mount keeps
# the host's owner and mode; the 0700 directory keeps other host users out.
#
# Environment: FLEET_PORT (8088), DOCKER_SOCK (/var/run/docker.sock),
# COMPOSE (the compose command; default docker-compose, else docker compose).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
secrets="$here/.secrets"
project=sandboxd-fleet
replicas=(r1 r2 r3)
FLEET_PORT="${FLEET_PORT:-8088}"
DOCKER_SOCK="${DOCKER_SOCK:-/var/run/docker.sock}"
url="http://127.0.0.1:$FLEET_PORT"
rel="${secrets#"$repo/"}"

log() { printf '==> fleet: %s\n' "$*" >&2; }
die() { printf 'fleet: ERROR: %s\n' "$*" >&2; exit 1; }

compose() {
	if [[ -n "${COMPOSE:-}" ]]; then
		# shellcheck disable=SC2086 # a command and its words
		$COMPOSE --project-directory "$here" -f "$here/docker-compose.yml" -p "$project" "$@"
	elif command -v docker-compose >/dev/null 2>&1; then
		docker-compose --project-directory "$here" -f "$here/docker-compose.yml" -p "$project" "$@"
	elif docker compose version >/dev/null 2>&1; then
		docker compose --project-directory "$here" -f "$here/docker-compose.yml" -p "$project" "$@"
	else
		die "docker-compose is not installed (apt-get install docker-compose)"
	fi
}

rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# write FILE MODE: stdin into a new FILE with MODE.
write() {
	(umask 077 && cat >"$1.tmp")
	chmod "$2" "$1.tmp"
	mv "$1.tmp" "$1"
}

# The instance id a replica labels its containers, networks and volumes
# with: derived from its data directory's path (runner.InstanceID).
instance() { printf %s "/var/lib/sandboxd/$1" | sha256sum | cut -c1-12; }

make_secrets() {
	install -d -m 0700 "$secrets"
	chmod 0700 "$secrets"
	new_keys=
	if [[ ! -e "$secrets/keys.env" ]]; then
		new_keys=1
		rm -f "$secrets/keys.yaml"
		admin="sbxdev_admin_$(rand_hex 24)"
		agent="sbxdev_agent_$(rand_hex 24)"
		write "$secrets/keys.env" 0600 <<-EOF
			# Development keys of the fleet (deploy/fleet). Use: . $rel/keys.env
			SANDBOXD_ADMIN_KEY=$admin
			SANDBOXD_AGENT_KEY=$agent
		EOF
	fi
	if [[ ! -e "$secrets/keys.yaml" ]]; then
		# shellcheck disable=SC1091
		admin="$(. "$secrets/keys.env" && echo "$SANDBOXD_ADMIN_KEY")"
		# shellcheck disable=SC1091
		agent="$(. "$secrets/keys.env" && echo "$SANDBOXD_AGENT_KEY")"
		write "$secrets/keys.yaml" 0644 <<-EOF
			# Keys of the development fleet; the secrets are in keys.env.
			keys:
			  - id: admin
			    tenant: ops
			    key_sha256: $(printf %s "$admin" | sha256sum | cut -d' ' -f1)
			    roles: [admin]
			  - id: agent
			    tenant: dev
			    key_sha256: $(printf %s "$agent" | sha256sum | cut -d' ' -f1)
			    roles: [agent]
		EOF
	fi
	[[ -e "$secrets/fleet.key" ]] || rand_hex 32 | write "$secrets/fleet.key" 0644
	[[ -e "$secrets/postgres-password" ]] || rand_hex 24 | write "$secrets/postgres-password" 0644
	[[ -e "$secrets/pgpass" ]] ||
		printf '*:*:sandboxd:sandboxd:%s\n' "$(cat "$secrets/postgres-password")" | write "$secrets/pgpass" 0644
	if [[ ! -e "$secrets/s3.env" ]]; then
		rm -f "$secrets/s3.json"
		write "$secrets/s3.env" 0600 <<-EOF
			SANDBOXD_CAPTURE_S3_ACCESS_KEY=SBXDEV$(rand_hex 7 | tr a-f A-F)
			SANDBOXD_CAPTURE_S3_SECRET_KEY=$(rand_hex 20)
		EOF
	fi
	if [[ ! -e "$secrets/s3.json" ]]; then
		# shellcheck disable=SC1091
		. "$secrets/s3.env"
		write "$secrets/s3.json" 0644 <<-EOF
			{"identities": [{"name": "sandboxd",
			  "credentials": [{"accessKey": "$SANDBOXD_CAPTURE_S3_ACCESS_KEY", "secretKey": "$SANDBOXD_CAPTURE_S3_SECRET_KEY"}],
			  "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}
		EOF
	fi
}

up() {
	[[ -S "$DOCKER_SOCK" ]] || die "$DOCKER_SOCK is not the engine's socket (set DOCKER_SOCK)"
	for img in "${SANDBOXD_IMAGE:-sandboxd/sandboxd:dev}" "${FLEET_POSTGRES_IMAGE:-sandboxd/fleet-postgres:dev}" \
		"${FLEET_S3_IMAGE:-sandboxd/fleet-s3:dev}" "${FLEET_HAPROXY_IMAGE:-sandboxd/fleet-haproxy:dev}" sandboxd/python:3.11; do
		docker image inspect "$img" >/dev/null 2>&1 || die "image $img is missing: run make fleet (it builds them)"
	done
	make_secrets
	# Not secret: what the compose file needs from this host.
	cat >"$here/.env" <<-EOF
		# Written by deploy/fleet/fleet.sh (make fleet); read by docker-compose.
		COMPOSE_PROJECT_NAME=$project
		DOCKER_GID=$(stat -c %g "$DOCKER_SOCK")
		DOCKER_SOCK=$DOCKER_SOCK
		FLEET_PORT=$FLEET_PORT
	EOF
	log "starting PostgreSQL, S3, r1..r3 and HAProxy (docker-compose up -d)"
	compose up -d --remove-orphans
	log "waiting for $url/healthz"
	local i
	for ((i = 0; i < 120; i++)); do
		curl -fsS -o /dev/null "$url/healthz" 2>/dev/null && break
		sleep 0.5
	done
	curl -fsS -o /dev/null "$url/healthz" || { compose ps; die "the balancer does not answer on $url"; }
	compose ps
	echo
	echo "The fleet answers on $url (HAProxy over r1, r2, r3). Logs: docker-compose -f deploy/fleet/docker-compose.yml logs -f"
	if [[ -n "$new_keys" ]]; then
		# shellcheck disable=SC1091
		. "$secrets/keys.env"
		echo
		echo "Development keys, printed this once (kept in $rel/keys.env):"
		echo "    admin (tenant ops):  $SANDBOXD_ADMIN_KEY"
		echo "    agent (tenant dev):  $SANDBOXD_AGENT_KEY"
	else
		echo "The keys: $rel/keys.env (printed when they were made)."
	fi
	echo
	echo "Try it:"
	echo "    . $rel/keys.env"
	echo "    curl -s -i -H \"Authorization: Bearer \$SANDBOXD_AGENT_KEY\" -d '{\"language\":\"python\",\"code\":\"print(6*7)\"}' $url/exec"
	echo
	echo "Stop it with: make fleet-down"
}

# lb CMD: CMD to HAProxy's runtime API (its stats socket listens on the
# haproxy container's loopback, port 9999; the image has bash, not socat).
lb() {
	# shellcheck disable=SC2016 # expanded by the container's bash
	compose exec -T haproxy bash -c 'exec 3<>/dev/tcp/127.0.0.1/9999 && printf "%s\n" "$1" >&3 && cat <&3' lb "$1"
}

# list KIND FILTER: the ids of the containers (all), networks or volumes
# that match FILTER.
list() {
	case "$1" in
		container) docker ps -a -q --filter "$2" ;;
		network) docker network ls -q --filter "$2" ;;
		volume) docker volume ls -q --filter "$2" ;;
	esac
}

down() {
	local strict="${1:-}"
	if [[ ! -e "$here/.env" ]]; then
		log "no .env: the fleet was never started here"
	else
		local n=0 r
		for r in "${replicas[@]}"; do
			n=$((n + $(list container "label=sandboxd.instance=$(instance "$r")" | wc -l)))
		done
		log "stopping the fleet; the replicas remove their $n sandbox container(s) at SIGTERM"
		compose down --volumes --remove-orphans
	fi
	# What must be gone: the project's containers, networks and volumes,
	# and everything the replicas labelled with their instance ids.
	local left=() r id what
	for what in container network volume; do
		while IFS= read -r id; do
			[[ -n "$id" ]] && left+=("$what $id (compose project $project)")
		done < <(list "$what" "label=com.docker.compose.project=$project")
		for r in "${replicas[@]}"; do
			while IFS= read -r id; do
				[[ -n "$id" ]] && left+=("$what $id (replica $r)")
			done < <(list "$what" "label=sandboxd.instance=$(instance "$r")")
		done
	done
	if [[ ${#left[@]} -eq 0 ]]; then
		log "nothing of the fleet is left (containers, networks, volumes)"
		return 0
	fi
	log "left behind, removing now:"
	printf '    %s\n' "${left[@]}" >&2
	local entry
	for entry in "${left[@]}"; do
		read -r what id _ <<<"$entry"
		case "$what" in
			container) docker rm -f -v "$id" >/dev/null ;;
			network) docker network rm "$id" >/dev/null ;;
			volume) docker volume rm -f "$id" >/dev/null ;;
		esac
	done
	[[ "$strict" != --strict ]] || die "the fleet left ${#left[@]} object(s) behind (see above)"
}

case "${1:-}" in
	up) up ;;
	down) down "${2:-}" ;;
	compose) shift; compose "$@" ;;
	lb) shift; lb "$*" ;;
	*) echo "usage: $0 up | down [--strict] | compose ARGS... | lb CMD" >&2; exit 2 ;;
esac
