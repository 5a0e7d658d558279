# podns: one static-ish binary in a small non-root image.
#
#   docker build -t podns:0.1.0 --build-arg PODNS_GIT_COMMIT=$(git rev-parse HEAD) .
#
# Two names for the same binary: /usr/local/bin/podns has no capability
# (the forward-target Deployment drops ALL and listens on 5353), and
# /usr/local/bin/podns-bind53 carries cap_net_bind_service=+ep so the
# DaemonSet can bind 169.254.20.11:53 as uid 65532 with
# allowPrivilegeEscalation: false (the runtime must grant NET_BIND_SERVICE,
# which the DaemonSet does; a binary whose file capability is not granted
# fails to exec, hence the second name).

FROM rust:1-bookworm AS build
WORKDIR /src
# The workspace: the binary (src/), the server library and the simulator
# (crates/); tests, benches and examples are copied only because the root
# manifest names them. Built without the default `sim` feature, so the
# image has no `podns sim` or `podns demo` (they say how to get them).
COPY Cargo.toml Cargo.lock build.rs ./
COPY crates ./crates
COPY src ./src
COPY tests ./tests
COPY benches ./benches
COPY examples ./examples
# The context has no .git: `podns --version` names the commit given here
# (build.rs; without it, "commit unknown"). Only the commit goes in, no
# date, so one commit builds one binary.
ARG PODNS_GIT_COMMIT
RUN cargo build --release --locked --no-default-features --bin podns \
    && strip target/release/podns

FROM debian:bookworm-slim AS runtime
COPY --from=build /src/target/release/podns /usr/local/bin/podns
# setcap here, in the final stage: extended attributes do not reliably
# survive COPY --from between stages.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libcap2-bin ca-certificates \
    && cp /usr/local/bin/podns /usr/local/bin/podns-bind53 \
    && setcap cap_net_bind_service=+ep /usr/local/bin/podns-bind53 \
    && apt-get purge -y libcap2-bin && apt-get autoremove -y \
    && rm -rf /var/lib/apt/lists/*
USER 65532:65532
EXPOSE 5353/udp 5353/tcp 9153/tcp
ENTRYPOINT ["/usr/local/bin/podns"]
CMD ["serve", "--dns-listen=0.0.0.0:5353", "--admin-listen=0.0.0.0:9153"]
