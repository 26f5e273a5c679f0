# arbord (and the arbor CLI) in a container:
#   docker build -t arbor .
#   docker run -d --name arbor -p 7181:7181 -p 2181:2181 -v arbor-data:/var/lib/arbor arbor
# See docs/operations.md, "Running in Docker".

# --- Build -------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# --locked: build exactly the dependency versions in Cargo.lock, and fail
# rather than update them. Plain RUN, no cache mounts: the file builds with
# the legacy builder as well as with BuildKit.
RUN cargo build --release --locked -p arbor-server -p arbor-cli

# --- Run ---------------------------------------------------------------------
FROM debian:bookworm-slim
# ca-certificates so tools in the image trust the usual CAs, curl for the
# healthcheck; nothing else.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
# A fixed, unprivileged uid, so a volume's files have the same owner in
# every container made from this image.
RUN groupadd --system --gid 10001 arbor \
    && useradd --system --uid 10001 --gid arbor --home-dir /var/lib/arbor \
       --shell /usr/sbin/nologin arbor \
    && mkdir -p /var/lib/arbor /etc/arbor \
    && chown arbor:arbor /var/lib/arbor
COPY --from=builder /src/target/release/arbord /src/target/release/arbor /usr/local/bin/
# Declared after the chown: a new named volume starts as a copy of this
# directory, owner included, so arbord can write to it.
VOLUME /var/lib/arbor
WORKDIR /var/lib/arbor
USER arbor

# 7181: native clients. 2181: ZooKeeper clients. 7182: the admin port
# (/metrics, /health, /ready, /commands). The admin port shows sessions and
# the addresses of their clients: publish it only to a trusted network, or
# not at all (the healthcheck below reaches it from inside the container).
EXPOSE 7181 2181 7182

# /health answers 200 while the process is up and the data directory takes
# a write and an fsync.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
    CMD curl -fsS http://127.0.0.1:7182/health || exit 1

# Inside a container every port must listen on all interfaces to be
# published; arbord's own defaults are loopback only. Giving other
# arguments (such as `--config /etc/arbor/arbor.toml`) replaces all of
# these, so the file must then set data_dir and the listen addresses.
ENTRYPOINT ["/usr/local/bin/arbord"]
CMD ["--data-dir", "/var/lib/arbor", "--listen", "0.0.0.0:7181", "--zk-listen", "0.0.0.0:2181", "--admin-listen", "0.0.0.0:7182"]
