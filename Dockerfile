# shoal container image: a static binary on a minimal non-root base.
#
#   make image                      # docker build -t ghcr.io/shoal-dev/shoal:<version> .
#   make image CONTAINER_ENGINE=podman IMAGE=registry.example/shoal:dev
#
# The build needs both base images at hand: pullable from their registries,
# or already in the local image store (or a mirror, via the build args).
ARG GO_IMAGE=golang:1.26
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
# GOTAGS=slim_sd: only file, DNS, HTTP, Kubernetes and Consul discovery.
ARG GOTAGS=
RUN CGO_ENABLED=0 go build -trimpath -tags "${GOTAGS}" -o /out/shoal \
      -ldflags "-s -w \
        -X github.com/prometheus/common/version.Version=${VERSION} \
        -X github.com/prometheus/common/version.Revision=${REVISION} \
        -X github.com/prometheus/common/version.Branch=main" \
      ./cmd/shoal \
 && mkdir -p /out/data

FROM ${BASE_IMAGE}
COPY --from=build /out/shoal /bin/shoal
# An empty data directory owned by the non-root user, for runs without a volume.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
EXPOSE 9940 7946 7946/udp
VOLUME ["/data"]
ENTRYPOINT ["/bin/shoal"]
CMD ["--config.file=/etc/shoal/shoal.yml", "--storage.path=/data"]
