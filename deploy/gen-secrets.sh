#!/bin/sh
# Writes deploy/.env: a random password for every NATS user of
# deploy/nats/accounts.conf and for the cluster's routes, readable by you
# only (0600). docker compose reads it from deploy/ (the compose file's
# folder); it is in .gitignore and .dockerignore: never commit it.
#
#   deploy/gen-secrets.sh            # refuses to overwrite an existing deploy/.env
#   deploy/gen-secrets.sh --force    # new passwords (restart everything after)
#
# The same file makes the Kubernetes secret (deploy/k8s/secrets.yaml):
#   kubectl create secret generic narratoria-nats -n narratoria --from-env-file=deploy/.env
set -eu
out="$(dirname "$0")/.env"
if [ -e "$out" ] && [ "${1:-}" != "--force" ]; then
  echo "$out exists: keeping its passwords (--force makes new ones)" >&2
  exit 1
fi
# 32 random bytes as 64 hex digits: safe in a URL (the route URLs carry
# the route password) and in nats-server's configuration.
secret() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }
umask 077
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
{
  echo "# Written by deploy/gen-secrets.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ). Never commit this file."
  for v in GAME_PASSWORD NARRATOR_PASSWORD SCHEDULER_PASSWORD CONSOLE_PASSWORD WORKER_STORY_PASSWORD \
           WORKER_ART_PASSWORD OPERATOR_PASSWORD SYS_PASSWORD ROUTE_PASSWORD; do
    echo "$v=$(secret)"
  done
} > "$tmp"
chmod 600 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out (mode 0600): give GAME_PASSWORD to your game servers (user game, inbox prefix _INBOX_game)"
