# sandboxd service image, built by `make docker` as sandboxd/sandboxd:dev.
#
# There is no golang image without a registry, so the static binary is built
# on the host (`make docker` runs `make sandboxd` first: a cgo build linked
# statically with glibc and libseccomp, see the Makefile) and copied in;
# .dockerignore limits the context to bin/sandboxd and profiles/ (without
# *.go).
#
# BASE defaults to the local Debian bookworm base that `make image` imports
# with mmdebstrap. With a registry, any Debian-like base works:
#     make docker BASE=debian:bookworm-slim
#
# Run (sandboxd drives the host's Docker engine through its socket, so the
# container needs the socket and its group; note that access to the socket
# is equivalent to root on the host):
#     docker run -d --name sandboxd -p 127.0.0.1:8080:8080 \
#         -v /var/run/docker.sock:/var/run/docker.sock \
#         --group-add "$(stat -c %g /var/run/docker.sock)" \
#         -v sandboxd-data:/var/lib/sandboxd \
#         sandboxd/sandboxd:dev
# Extra flags are appended to the command line, e.g.
#         ... sandboxd/sandboxd:dev --keys-file /etc/sandboxd/keys.yaml
# (mount the keys file read-only). Without --keys-file sandboxd prints a
# development key to the container log. Other profiles: mount a directory
# over /etc/sandboxd/profiles. The sandbox image (sandboxd/python:3.11) must
# exist in the engine the socket belongs to (`make image`).
#
# Classic-builder syntax only (DOCKER_BUILDKIT=0 works on engine 20.10).
ARG BASE=sandboxd/bookworm-python:latest

# --- stage: assemble the files with their final owners and modes ------------
FROM ${BASE} AS stage
ARG SANDBOXD_UID=10001
ARG SANDBOXD_GID=10001
COPY bin/sandboxd /rootfs/usr/local/bin/sandboxd
COPY profiles/ /rootfs/etc/sandboxd/profiles/
RUN set -eu; \
    find /rootfs/etc/sandboxd/profiles \( -name '*.go' -o -name testdata -prune \) -exec rm -rf {} +; \
    chmod 0755 /rootfs/usr/local/bin/sandboxd; \
    chmod -R u=rwX,go=rX /rootfs/etc/sandboxd; \
    install -d -m 0750 -o "$SANDBOXD_UID" -g "$SANDBOXD_GID" /rootfs/var/lib/sandboxd; \
    mkdir -p /rootfs/etc; \
    cp -p /etc/passwd /etc/group /rootfs/etc/; \
    grep -q '^sandboxd:' /rootfs/etc/group || echo "sandboxd:x:$SANDBOXD_GID:" >>/rootfs/etc/group; \
    grep -q '^sandboxd:' /rootfs/etc/passwd || \
        echo "sandboxd:x:$SANDBOXD_UID:$SANDBOXD_GID:sandboxd:/var/lib/sandboxd:/usr/sbin/nologin" >>/rootfs/etc/passwd; \
    find /rootfs -perm /6000 -exec chmod u-s,g-s {} +

# --- final image --------------------------------------------------------------
FROM ${BASE}
ARG SANDBOXD_UID=10001
ARG SANDBOXD_GID=10001
COPY --from=stage /rootfs/ /
ENV PATH=/usr/local/bin:/usr/bin:/bin \
    LANG=C.UTF-8
WORKDIR /var/lib/sandboxd
USER ${SANDBOXD_UID}:${SANDBOXD_GID}
EXPOSE 8080
# Override the labels inherited from the local sandbox base, so this image is
# never mistaken for a sandbox base/recipe by images/build.sh or operators.
LABEL org.opencontainers.image.title="sandboxd" \
      org.opencontainers.image.description="HTTP service that runs untrusted Python in locked-down Docker containers" \
      sandboxd.image-kind="service" \
      sandboxd.managed-image="false" \
      sandboxd.recipe=""
ENTRYPOINT ["/usr/local/bin/sandboxd", "serve", "--addr", "0.0.0.0:8080", "--data-dir", "/var/lib/sandboxd", "--profiles-dir", "/etc/sandboxd/profiles"]
