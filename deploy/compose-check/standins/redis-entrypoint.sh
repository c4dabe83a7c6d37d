#!/bin/sh
# Entry point of the redis:7 stand-in (deploy/compose-check/standins/Dockerfile): as the official image,
# `redis-server` with options but no config file runs with protected mode off, so that other containers on
# the network can connect; anything else runs as given.
set -eu
if [ "${1:-}" = redis-server ]; then
  case "${2:--}" in
    -*) shift; exec redis-server --protected-mode no "$@" ;;
  esac
fi
exec "$@"
