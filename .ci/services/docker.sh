# Docker engine for the container tests (sourced by .ci/run).
#
# docker_up: starts dockerd with all its state under a temp folder, then builds an offline
# base image, since images cannot be pulled here: a Debian rootfs from debootstrap (cached as
# a tarball under $ROOST_ROOTFS_CACHE), imported with `docker import`, plus this host's CA
# bundle and pip settings so that pip inside image builds reaches PyPI as the host does.
# Exports DOCKER_HOST, ROOST_BASE_IMAGE and ROOST_REQUIRE_DOCKER=1.
# docker_down: stops dockerd by its pid and removes its state.

ROOST_ROOTFS_CACHE="${ROOST_ROOTFS_CACHE:-/var/cache/roost}"
ROOST_BASE_IMAGE_NAME="roost-base:latest"
# python3-venv for the image's virtualenv; g++ and make build fast-downward's planner.
ROOST_ROOTFS_PACKAGES="python3,python3-venv,ca-certificates,g++,make,git"
ROOST_ROOTFS_SUITE="bookworm"

_docker_log() { echo "[docker] $*" >&2; }

_docker_mirror() {
    # The Debian mirror this host's apt uses, so debootstrap goes where apt may go.
    local uri
    uri=$(grep -rhoE '^URIs: *http[^ ]*/debian/?$' /etc/apt/sources.list.d/ 2>/dev/null | head -1 | sed 's/^URIs: *//')
    [ -n "$uri" ] || uri=$(grep -hoE '^deb +http[^ ]*/debian/? ' /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}')
    echo "${uri:-http://deb.debian.org/debian}"
}

_docker_rootfs_tarball() {
    # Prints the path of the cached rootfs tarball, building it with debootstrap if missing.
    local key tarball work
    key=$(printf '%s %s' "$ROOST_ROOTFS_SUITE" "$ROOST_ROOTFS_PACKAGES" | sha256sum | cut -c1-12)
    tarball="$ROOST_ROOTFS_CACHE/debian-$ROOST_ROOTFS_SUITE-$key.tar"
    if [ ! -s "$tarball" ]; then
        mkdir -p "$ROOST_ROOTFS_CACHE"
        work=$(mktemp -d /tmp/roost-rootfs.XXXXXX)
        _docker_log "debootstrap $ROOST_ROOTFS_SUITE ($ROOST_ROOTFS_PACKAGES) into $work"
        if ! debootstrap --variant=minbase --include="$ROOST_ROOTFS_PACKAGES" \
                "$ROOST_ROOTFS_SUITE" "$work/rootfs" "$(_docker_mirror)" >"$work/debootstrap.log" 2>&1; then
            tail -20 "$work/debootstrap.log" >&2
            rm -rf "$work"
            return 1
        fi
        rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
        tar -C "$work/rootfs" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
        rm -rf "$work"
    fi
    echo "$tarball"
}

_docker_pip_conf() {
    # The host's pip settings that make sense inside a container: its CA bundle (copied in
    # at the same path), timeout, and any http(s) index; local file:// indexes stay behind.
    echo "[global]"
    echo "cert = /etc/ssl/certs/ca-certificates.crt"
    echo "timeout = ${PIP_DEFAULT_TIMEOUT:-180}"
    python3 -m pip config list 2>/dev/null | while IFS='=' read -r key value; do
        value=${value#\'}; value=${value%\'}
        case "$key" in
            global.index-url|global.extra-index-url)
                urls=$(tr ' ' '\n' <<<"$value" | grep -E '^https?://' | tr '\n' ' ')
                [ -n "$urls" ] && echo "${key#global.} = $urls"
                ;;
        esac
    done
}

_docker_base_image() {
    local tarball ctx raw ca
    tarball=$(_docker_rootfs_tarball) || return 1
    raw="roost-rootfs:$(basename "$tarball" .tar | sed 's/^debian-//')"
    docker image inspect "$raw" >/dev/null 2>&1 || docker import "$tarball" "$raw" >/dev/null || return 1
    ca=$(python3 -m pip config get global.cert 2>/dev/null || true)
    [ -s "$ca" ] || ca=/etc/ssl/certs/ca-certificates.crt
    ctx=$(mktemp -d /tmp/roost-base.XXXXXX)
    cp "$ca" "$ctx/ca-certificates.crt"
    _docker_pip_conf >"$ctx/pip.conf"
    cat >"$ctx/Dockerfile" <<EOF
FROM $raw
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY pip.conf /etc/pip.conf
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
CMD ["/bin/bash"]
EOF
    docker build -q -t "$ROOST_BASE_IMAGE_NAME" "$ctx" >/dev/null
    local rc=$?
    rm -rf "$ctx"
    return $rc
}

docker_up() {
    DOCKER_STATE_DIR=$(mktemp -d /tmp/roost-dockerd.XXXXXX)
    dockerd --data-root "$DOCKER_STATE_DIR/data" --exec-root "$DOCKER_STATE_DIR/exec" \
        --pidfile "$DOCKER_STATE_DIR/dockerd.pid" --host "unix://$DOCKER_STATE_DIR/docker.sock" \
        >"$DOCKER_STATE_DIR/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    export DOCKER_HOST="unix://$DOCKER_STATE_DIR/docker.sock"
    local i
    for i in $(seq 60); do
        docker version >/dev/null 2>&1 && break
        if ! kill -0 "$DOCKERD_PID" 2>/dev/null || [ "$i" = 60 ]; then
            _docker_log "dockerd did not come up; its log:"
            tail -20 "$DOCKER_STATE_DIR/dockerd.log" >&2
            return 1
        fi
        sleep 1
    done
    _docker_log "dockerd (pid $DOCKERD_PID) answers on $DOCKER_HOST"
    _docker_base_image || { _docker_log "building $ROOST_BASE_IMAGE_NAME failed"; return 1; }
    _docker_log "base image $ROOST_BASE_IMAGE_NAME ready"
    export ROOST_BASE_IMAGE="$ROOST_BASE_IMAGE_NAME"
    export ROOST_REQUIRE_DOCKER=1
}

docker_down() {
    # Every step tolerates failure: this runs from an EXIT trap, maybe after a failed docker_up.
    [ -n "${DOCKERD_PID:-}" ] || return 0
    local ids
    ids=$(docker ps -aq 2>/dev/null || true)
    if [ -n "$ids" ]; then docker rm -f $ids >/dev/null 2>&1 || true; fi
    kill "$DOCKERD_PID" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 1; done
    kill -9 "$DOCKERD_PID" 2>/dev/null || true
    wait "$DOCKERD_PID" 2>/dev/null || true
    umount -R "$DOCKER_STATE_DIR/exec" "$DOCKER_STATE_DIR/data" 2>/dev/null || true
    rm -rf "$DOCKER_STATE_DIR"
    _docker_log "dockerd (pid $DOCKERD_PID) stopped"
    unset DOCKERD_PID DOCKER_HOST
}
