# sandboxd -- build, run and test.
#
#   make image    sandbox image sandboxd/python:3.11 (no registry needed; see images/build.sh)
#   make build    bin/sandboxd and bin/sandboxd-launcher
#   make run      image + build, then serve on $(ADDR)
#   make test     image + build, then go vet and the race-enabled test suite
#   make docker   service image sandboxd/sandboxd:dev (top-level Dockerfile)
#   make gvisor   install gVisor (runsc) and register it with the engine, for
#                 profiles with runtime: runsc (see scripts/gvisor.sh)
#   make bench    latency and throughput benchmark -> bench/RESULTS.md
#   make clean    remove bin/
#
# Variables: GO, IMAGE, BASE (for `make docker`), DOCKER_IMAGE, ADDR, KEYS_FILE,
# FORCE=1 (rebuild the sandbox image even if its recipe is unchanged),
# GVISOR_PLATFORM (ptrace or kvm, for `make gvisor`), DOCKER_DAEMON_JSON.

GO ?= go
IMAGE ?= sandboxd/python:3.11
BASE_REPO ?= sandboxd/bookworm-python
# Base of the sandboxd service image. Default: the local Debian base that
# `make image` imports; with a registry e.g. BASE=debian:bookworm-slim.
BASE ?= $(BASE_REPO):latest
DOCKER_IMAGE ?= sandboxd/sandboxd:dev
ADDR ?= 127.0.0.1:8080
DATA_DIR ?= ./data
PROFILES_DIR ?= ./profiles
KEYS_FILE ?=
FORCE ?=
GVISOR_PLATFORM ?= ptrace
DOCKER_DAEMON_JSON ?= /etc/docker/daemon.json

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

BIN := bin
LAUNCHER := $(BIN)/sandboxd-launcher
SANDBOXD := $(BIN)/sandboxd
# Static, reproducible launcher: identical sources give an identical binary,
# so its sha256 (part of the image recipe) only changes with the code.
LAUNCHER_LDFLAGS := -s -w -buildid=

# The classic builder is what works without the buildx plugin (engine 20.10).
DOCKER_BUILDKIT ?= $(shell docker buildx version >/dev/null 2>&1 && echo 1 || echo 0)

.PHONY: all help image launcher build sandboxd run test vet docker gvisor clean fmt-check bench

all: build

help:
	@sed -n '1,/^$$/p' Makefile | sed 's/^# \{0,1\}//'

# Go's build cache makes these cheap when nothing changed, so they are always
# run (PHONY) instead of tracking Go dependencies in make.
launcher:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(LAUNCHER_LDFLAGS)' -o $(LAUNCHER) ./cmd/sandboxd-launcher

sandboxd:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-X main.version=$(VERSION)' -o $(SANDBOXD) ./cmd/sandboxd

build: sandboxd launcher

image: launcher
	IMAGE='$(IMAGE)' BASE_REPO='$(BASE_REPO)' LAUNCHER='$(CURDIR)/$(LAUNCHER)' FORCE='$(FORCE)' bash images/build.sh

# Idempotent: installs runsc only when missing, and edits daemon.json and
# reloads the engine only when the runsc entry is not as wanted.
gvisor:
	IMAGE='$(IMAGE)' GVISOR_PLATFORM='$(GVISOR_PLATFORM)' DOCKER_DAEMON_JSON='$(DOCKER_DAEMON_JSON)' bash scripts/gvisor.sh

run: image build
	mkdir -p $(DATA_DIR)
	$(SANDBOXD) serve --addr $(ADDR) --data-dir $(DATA_DIR) --profiles-dir $(PROFILES_DIR)$(if $(KEYS_FILE), --keys-file $(KEYS_FILE))

vet:
	$(GO) vet ./...

test: image build
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 25m ./...

# The sandboxd binary is built on the host (no golang image without a
# registry) and copied in; the local base needs `make image` first.
docker: sandboxd $(if $(filter $(BASE_REPO):%,$(BASE)),image)
	DOCKER_BUILDKIT=$(DOCKER_BUILDKIT) docker build --build-arg BASE='$(BASE)' -t '$(DOCKER_IMAGE)' -f Dockerfile .

fmt-check:
	@out="$$(find . -name '*.go' -not -path './.git/*' -not -path './bin/*' -not -path './data/*' -exec gofmt -l {} +)"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Latency and throughput side by side with docker run --rm and host python3;
# writes bench/RESULTS.md. Minutes long: not part of make test.
bench: image build
	$(GO) run ./bench -out bench/RESULTS.md $(BENCH_FLAGS)

clean:
	rm -rf $(BIN)
