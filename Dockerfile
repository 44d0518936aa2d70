# hookgate images. Two targets:
#
#   gateway   the `gateway` binary (serve, ca, hooks run, sandbox exec), plus
#             curl, python3 and the example agent — the docker-compose demo
#             uses it for both the gateway and the sandbox service.
#   receiver  examples/receiver, the example HTTPS hook receiver.
#
#   docker build --target gateway  -t hookgate/gateway .
#   docker build --target receiver -t hookgate/receiver .
#
# No BuildKit-only syntax, so docker-compose v1's classic builder works too.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=docker
ENV CGO_ENABLED=0
RUN go build -trimpath -buildvcs=false -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/gateway ./cmd/gateway \
 && go build -trimpath -buildvcs=false -ldflags "-s -w" \
        -o /out/receiver ./examples/receiver

# Shared runtime base: the same users and directories in every image, so a
# named volume gets the same ownership whichever container mounts it first.
#   /var/lib/hookgate/ca            the gateway's CA, key included: root only
#   /var/lib/hookgate/trust         what the sandbox may read: ca.pem, bundle.pem
#   /var/lib/hookgate/receiver-tls  written by the receiver (non-root), read by the gateway
#   /workspace                      the sandbox's working directory
# examples/compose/gateway.yaml names its files relative to itself (ca/...,
# receiver-tls/...), so that the same file works outside containers; the
# symlinks in /etc/hookgate lead those paths to the volumes.
FROM debian:bookworm-slim AS base
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 hookgate \
 && useradd --system --uid 10001 --gid hookgate --home-dir /nonexistent --shell /usr/sbin/nologin hookgate \
 && mkdir -p /etc/hookgate /var/lib/hookgate/ca /var/lib/hookgate/trust /var/lib/hookgate/receiver-tls /workspace \
 && chmod 0700 /var/lib/hookgate/ca \
 && chmod 0755 /var/lib/hookgate/trust \
 && chown hookgate:hookgate /var/lib/hookgate/receiver-tls /workspace \
 && ln -s /var/lib/hookgate/ca /etc/hookgate/ca \
 && ln -s /var/lib/hookgate/receiver-tls /etc/hookgate/receiver-tls

FROM base AS receiver
COPY --from=build /out/receiver /usr/local/bin/receiver
USER hookgate:hookgate
ENV RECEIVER_CERT_DIR=/var/lib/hookgate/receiver-tls
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/receiver"]

# Last, so that a plain `docker build .` builds the gateway.
FROM base AS gateway
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl python3 \
 && rm -rf /var/lib/apt/lists/*
# No nftables or iptables package: `serve --redirect` and `sandbox exec`
# talk netlink directly.
COPY --from=build /out/gateway /usr/local/bin/gateway
COPY examples/compose/gateway-entrypoint.sh /usr/local/bin/hookgate-entrypoint
COPY examples/compose/gateway.yaml /etc/hookgate/gateway.yaml
COPY examples/agent/ /opt/hookgate/agent/
RUN chmod 0755 /usr/local/bin/hookgate-entrypoint /opt/hookgate/agent/*.sh
# Root, because `gateway serve --redirect` installs nftables rules and marks
# its sockets (SO_MARK): both need CAP_NET_ADMIN, which Docker gives a
# non-root user only in its bounding set, never as an effective capability.
# docker-compose.yml drops every other capability (cap_drop: ALL, cap_add:
# NET_ADMIN) and runs the sandbox service as the hookgate user. Without
# --redirect (explicit proxy only) run it as --user 10001 with a volume that
# user can write for the CA.
USER root
WORKDIR /workspace
EXPOSE 15001 9090
ENTRYPOINT ["/usr/local/bin/hookgate-entrypoint"]
CMD ["gateway", "serve", "--config", "/etc/hookgate/gateway.yaml", "--redirect"]
