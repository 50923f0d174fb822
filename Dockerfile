# syntax=docker/dockerfile:1
#
# walpost's relay, cdc, as a container image:
#
#   docker build --build-arg VERSION=$(git describe --tags --always) -t walpost/cdc .
#   docker run --rm -v $PWD/cdc.yaml:/etc/walpost/cdc.yaml:ro -e PGPASSWORD walpost/cdc
#
# A static binary (CGO_ENABLED=0) on distroless static, as the numeric
# non-root user 65532. No HEALTHCHECK: orchestrators probe /healthz (alive)
# and /readyz (streaming; 503 on a hot standby) on http.listen.
#
# Never built here (no container engine on the project's machines);
# deploy/dockerfile_test.go (cd deploy && go test ./...) checks this
# file's runtime stage and builds the binary with this file's `go build`
# line. See docs/deploy.md.

# Any Go >= 1.21 can fetch the toolchain go.mod names; GOTOOLCHAIN below
# makes it do so (from the module proxy) whatever the base image's Go is.
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
ENV GOTOOLCHAIN=go1.27.3 CGO_ENABLED=0
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/root/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/cdc ./cmd/cdc

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/cdc /cdc
USER 65532:65532
# http.listen: /metrics, /healthz, /readyz (the sample configs listen on 0.0.0.0:9187).
EXPOSE 9187
ENTRYPOINT ["/cdc"]
CMD ["run", "--config", "/etc/walpost/cdc.yaml"]
