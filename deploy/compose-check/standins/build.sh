#!/usr/bin/env bash
# Builds the local stand-ins of the official base images (Dockerfile here) for a host that reaches no image
# registry: zico-standin/base:bookworm is a Debian bookworm root file system (debootstrap, minbase) with Python
# 3.11, Node.js, PostgreSQL 15 and Redis 7 from Debian's packages, imported once (`docker import`) and kept as
# the cache; then zico-standin/{python,node,postgres,redis} (docker's build cache). Needs root, debootstrap and
# a Debian mirror over HTTP (MIRROR, default http://deb.debian.org/debian).
# Usage: deploy/compose-check/standins/build.sh   (prints each image it has)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
BASE=zico-standin/base:bookworm
PACKAGES="python3 python3-venv python3-pip nodejs npm postgresql-15 redis-server redis-tools ca-certificates"

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  root="$(mktemp -d /tmp/zico-standin-rootfs.XXXXXX)"
  trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
  echo "debootstrap of bookworm into $root"
  debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log"; exit 1; }
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"  # no service starts inside the chroot
  chmod +x "$root/usr/sbin/policy-rc.d"
  mount -t proc proc "$root/proc"
  chroot "$root" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends $PACKAGES >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*"
  umount "$root/proc"
  # the package's own cluster is not the image's: the postgres stand-in creates its cluster at first start
  rm -rf "$root/var/lib/postgresql/15" "$root/etc/postgresql/15" "$root/usr/sbin/policy-rc.d" "$root.log"
  tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$BASE" >/dev/null
fi
for target in python node postgres redis; do
  docker build -q --target "$target" -t "zico-standin/$target:bookworm" "$HERE" >/dev/null
  echo "zico-standin/$target:bookworm"
done
