# The asa-analyze binary in a small image (examples/k8s/analyze-job.yaml runs it):
#   docker build -t asa-analyze:latest .
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY crates crates
COPY python python
COPY benches benches
RUN cargo build --release --locked --bin asa-analyze

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/asa-analyze /usr/local/bin/asa-analyze
ENTRYPOINT []
CMD ["asa-analyze", "--help"]
