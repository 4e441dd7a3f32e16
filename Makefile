# sandboxd -- build, run and test. `make help` lists every target with one
# line each (the `## ` comment on its line).
#
# Variables: GO, IMAGE, BASE (for `make docker`), DOCKER_IMAGE, ADDR, KEYS_FILE,
# BENCH_FLAGS (for `make bench`), PYTHON (for `make test-python`; /usr/bin/python3),
# FORCE=1 (rebuild the sandbox image even if its recipe is unchanged),
# GVISOR_PLATFORM (ptrace or kvm, for `make gvisor`), DOCKER_DAEMON_JSON.

GO ?= go
IMAGE ?= sandboxd/python:3.11
# The data image: numpy, pandas and matplotlib from Debian, for the data profile.
DATA_IMAGE ?= sandboxd/python-data:3.11
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
# The driver of browser sandboxes (POST /fetch render: true, PDFs), static
# and reproducible like the launcher.
BROWSER_DRIVER := $(BIN)/sandboxd-browser
SANDBOXD := $(BIN)/sandboxd
# Static, reproducible launcher: identical sources give an identical binary,
# so its sha256 (part of the image recipe) only changes with the code.
LAUNCHER_LDFLAGS := -s -w -buildid=

# The classic builder is what works without the buildx plugin (engine 20.10).
DOCKER_BUILDKIT ?= $(shell docker buildx version >/dev/null 2>&1 && echo 1 || echo 0)

.PHONY: all help image image-default image-data image-browser launcher browser-driver build sandboxd cgo-deps fleet-deps s3-test-server test-deps python-deps run test test-python vet lint docker gvisor clean fmt-check bench soak fleet-images fleet fleet-down fleet-test

all: build ## the same as build

help: ## list the targets with one line each
	@awk -F ':[^#]*## ' '/^[a-z0-9-]+:.*## / { printf "  make %-15s %s\n", $$1, $$2 }' $(firstword $(MAKEFILE_LIST))

# Go's build cache makes these cheap when nothing changed, so they are always
# run (PHONY) instead of tracking Go dependencies in make.
launcher: ## bin/sandboxd-launcher, the static pid 1 of every sandbox
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(LAUNCHER_LDFLAGS)' -o $(LAUNCHER) ./cmd/sandboxd-launcher

# sandboxd links libseccomp (cgo) for `sandboxd seccomp check`. It is still
# one static binary: glibc and libseccomp.a linked in, the pure-Go resolver
# and user lookup (netgo, osusergo), so it runs on any base image.
SANDBOXD_TAGS := netgo,osusergo
SANDBOXD_LDFLAGS := -X main.version=$(VERSION) -linkmode external -extldflags "-static"

sandboxd: cgo-deps ## bin/sandboxd, one static binary (cgo for libseccomp)
	CGO_ENABLED=1 $(GO) build -trimpath -tags '$(SANDBOXD_TAGS)' -ldflags='$(SANDBOXD_LDFLAGS)' -o $(SANDBOXD) ./cmd/sandboxd

# What the cgo build of sandboxd (and go vet / go test, which build it too)
# needs: a C compiler, pkg-config, libseccomp's headers and static library
# (libseccomp-dev) and glibc's (libc6-dev). Installed with apt-get when
# missing.
cgo-deps: ## install gcc, pkg-config, libseccomp-dev and libc6-dev when missing
	@if command -v gcc >/dev/null && command -v pkg-config >/dev/null && pkg-config --exists libseccomp && \
		[ -e "$$(gcc -print-file-name=libseccomp.a)" ] && [ -e "$$(gcc -print-file-name=libc.a)" ]; then exit 0; fi; \
	echo "==> installing gcc, pkg-config, libseccomp-dev and libc6-dev for the cgo build of sandboxd"; \
	sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -q gcc libc6-dev pkg-config libseccomp-dev || \
		{ $$sudo apt-get update -q && $$sudo apt-get install -y -q gcc libc6-dev pkg-config libseccomp-dev; }

browser-driver: ## bin/sandboxd-browser, the static driver of the browser image
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='$(LAUNCHER_LDFLAGS)' -o $(BROWSER_DRIVER) ./cmd/sandboxd-browser

build: sandboxd launcher browser-driver ## bin/sandboxd, bin/sandboxd-launcher and bin/sandboxd-browser

image: image-default image-data image-browser ## all three sandbox images: the default, the data and the browser image

image-default: launcher ## the default profile's image IMAGE (about 2 minutes the first time)
	IMAGE='$(IMAGE)' BASE_REPO='$(BASE_REPO)' LAUNCHER='$(CURDIR)/$(LAUNCHER)' FORCE='$(FORCE)' bash images/build.sh

image-data: launcher ## the data profile's image DATA_IMAGE: numpy, pandas, matplotlib (minutes)
	IMAGE='$(DATA_IMAGE)' BASE_REPO='$(BASE_REPO)-data' LAUNCHER='$(CURDIR)/$(LAUNCHER)' FORCE='$(FORCE)' \
		EXTRA_PACKAGES=images/data/packages EXTRA_SMOKE='import numpy, pandas, importlib.util; assert importlib.util.find_spec("matplotlib")' bash images/build.sh

image-browser: browser-driver ## the browser image sandboxd/browser for render: true and PDFs (minutes)
	DRIVER='$(CURDIR)/$(BROWSER_DRIVER)' FORCE='$(FORCE)' bash images/browser/build.sh

# Idempotent: installs runsc only when missing, and edits daemon.json and
# reloads the engine only when the runsc entry is not as wanted.
gvisor: ## install gVisor (runsc) and register it with the engine (profile strict)
	IMAGE='$(IMAGE)' GVISOR_PLATFORM='$(GVISOR_PLATFORM)' DOCKER_DAEMON_JSON='$(DOCKER_DAEMON_JSON)' bash scripts/gvisor.sh

# The default profile's image first, then the service; the data and browser
# images build in the background (scripts/images-background.sh), and until
# each is ready its profiles answer 503 UNAVAILABLE saying how far it is.
run: image-default build ## build the default image and serve on ADDR; the other images build in the background
	mkdir -p $(DATA_DIR)
	@bash scripts/images-background.sh '$(DATA_DIR)/image-builds' image-data='$(DATA_IMAGE)' image-browser=sandboxd/browser:latest
	$(SANDBOXD) serve --addr $(ADDR) --data-dir $(DATA_DIR) --profiles-dir $(PROFILES_DIR)$(if $(KEYS_FILE), --keys-file $(KEYS_FILE))

vet: cgo-deps ## go vet ./...
	$(GO) vet ./...

# staticcheck at a pinned version, built through the module proxy (cached
# after the first run).
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint: cgo-deps fmt-check ## gofmt, go vet and staticcheck
	$(GO) vet ./...
	$(STATICCHECK) ./...

# The packages first, in parallel; then the end-to-end suites against the
# engine one at a time (-p 1): side by side on 2 cores they starved each
# other's sandboxes (memory bombs timed out before reaching their limit,
# containers took seconds to start), which made their bounds flaky.
E2E_PKGS := ./tests/...
# tests/ serves the profiles with a container per run; these of its tests
# run again with the shipped ones (cells): the lockdown, limits and
# interpreter tests.
CELL_E2E_TESTS := ^(TestNoNetwork|TestReadOnlyRootAndNoexecTmp|TestOutputLinksAndSpecialFiles|TestIdentityAndPrivileges|TestPtraceAndUnshareRefused|TestNoHostEnvironment|TestSandboxCannotForgeItsResult|TestSandboxCannotSilenceTheLauncher|TestTimeout|TestOOM|TestForkBomb|TestPidsLimit|TestLoweredLimits|TestRaisedLimitsRefused|TestWaiting.*|TestDataProfilePreloads|TestColdPreloadIsNotOnTheJobClock|TestHelloWorld|TestStdinEcho|TestFilesInAndOut|TestNonZeroExit|TestNonUTF8Output|TestOutputTruncation|TestConcurrentExecs|TestEnvPassedToCode|TestGVisor.*)$$
test: image build test-deps ## images, build, vet, staticcheck, race-enabled tests, end-to-end suites, test-python
	$(GO) vet ./...
	$(STATICCHECK) ./...
	$(GO) test -race -count=1 -timeout 25m $$($(GO) list ./... | grep -v '/tests')
	$(GO) test -race -count=1 -timeout 25m -p 1 $(E2E_PKGS)
	SANDBOXD_TEST_ISOLATION=cell $(GO) test -race -count=1 -timeout 25m -run '$(CELL_E2E_TESTS)' ./tests/
	$(MAKE) --no-print-directory test-python

# The Python client's tests (clients/python/tests, pytest) with Debian's
# Python, which has the packages python-deps installs (the python3 first on
# PATH may be another). They start bin/sandboxd themselves, once, with
# profiles, keys and a tenants file of their own, and stop it at the end;
# about a minute.
PYTHON ?= /usr/bin/python3
test-python: build python-deps ## the Python client's tests (clients/python) against a real sandboxd
	cd clients/python && SANDBOXD_BIN='$(CURDIR)/$(SANDBOXD)' $(PYTHON) -m pytest -q -p no:cacheprovider tests

# PostgreSQL's server and HAProxy, Debian's, for the fleet's tests: they
# start throwaway servers of their own (internal/pgtest, tests/fleet); the
# packages' own services are not needed.
fleet-deps: ## install PostgreSQL and HAProxy (Debian's) for the fleet's tests
	@if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && command -v haproxy >/dev/null; then exit 0; fi; \
	echo "==> installing postgresql and haproxy for the fleet's tests"; \
	sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -q postgresql haproxy || { $$sudo apt-get update -q && $$sudo apt-get install -y -q postgresql haproxy; }

# The S3-compatible server the capture and fleet tests start (SeaweedFS,
# built from its Go module by internal/s3test into a cache outside the
# repository: minutes the first time, nothing after).
s3-test-server: ## build the S3-compatible server the tests start (SeaweedFS, from its Go module)
	$(GO) run ./internal/s3test/build

# What the tests need besides the build: headless Chromium (Debian's
# package) for the review page's browser test (internal/reviewui/browser_test.go),
# Debian's httpx, pytest, pip and setuptools for the Python client's, and
# the fleet's servers.
test-deps: python-deps fleet-deps s3-test-server ## what make test needs beyond images: Python, PostgreSQL, HAProxy, S3, Chromium
	@command -v chromium >/dev/null && exit 0; \
	echo "==> installing chromium for the review page's browser test"; \
	sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -q chromium || { $$sudo apt-get update -q && $$sudo apt-get install -y -q chromium; }

PYTHON_DEBS := python3-httpx python3-pytest python3-pip python3-setuptools
python-deps: ## install python3-httpx, python3-pytest, pip and setuptools (Debian's)
	@$(PYTHON) -c 'import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in ("httpx", "pytest", "pip", "setuptools")))' 2>/dev/null && exit 0; \
	echo "==> installing $(PYTHON_DEBS) for the Python client's tests"; \
	sudo=; [ "$$(id -u)" -eq 0 ] || sudo=sudo; \
	export DEBIAN_FRONTEND=noninteractive; \
	$$sudo apt-get install -y -q $(PYTHON_DEBS) || { $$sudo apt-get update -q && $$sudo apt-get install -y -q $(PYTHON_DEBS); }

# The sandboxd binary is built on the host (no golang image without a
# registry) and copied in; the local base needs `make image` first.
docker: sandboxd $(if $(filter $(BASE_REPO):%,$(BASE)),image) ## the service image DOCKER_IMAGE (top-level Dockerfile)
	DOCKER_BUILDKIT=$(DOCKER_BUILDKIT) docker build --build-arg BASE='$(BASE)' -t '$(DOCKER_IMAGE)' -f Dockerfile .

# The development fleet (deploy/fleet/docker-compose.yml, Debian's
# docker-compose). Its images are built here from Debian's packages and
# host-built binaries, no registry: the service image (make docker), and
# PostgreSQL, the S3 server (SeaweedFS's weed from internal/s3test) and
# HAProxy by images/fleet/build.sh, one at a time, each skipped when its
# recipe is unchanged. The replicas run their sandboxes on this engine, so
# the sandbox images (make image, through make docker) must exist.
fleet-images: docker ## the development fleet's images: the service, PostgreSQL, S3 and HAProxy
	FORCE='$(FORCE)' bash images/fleet/build.sh postgres
	FORCE='$(FORCE)' GO='$(GO)' bash images/fleet/build.sh s3
	FORCE='$(FORCE)' bash images/fleet/build.sh haproxy

fleet: fleet-images ## a development fleet here: PostgreSQL, S3, three replicas, HAProxy on 127.0.0.1:8088
	bash deploy/fleet/fleet.sh up

fleet-down: ## stop the development fleet; remove its containers, networks, volumes, sandboxes
	bash deploy/fleet/fleet.sh down

# Not part of make test: minutes on a fresh machine (image builds). Ends
# with the fleet stopped, whatever the smoke test found, and fails when
# the replicas left a container, network or volume behind.
fleet-test: fleet-images ## make fleet, a smoke test through the balancer, then make fleet-down
	@rc=0; { bash deploy/fleet/fleet.sh up && $(PYTHON) deploy/fleet/smoke.py; } || rc=1; \
	bash deploy/fleet/fleet.sh down --strict || rc=1; exit $$rc

fmt-check: ## fail when a Go file is not gofmt'ed
	@out="$$(find . -name '*.go' -not -path './.git/*' -not -path './bin/*' -not -path './data/*' -exec gofmt -l {} +)"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Ten thousand execs in cells, then a shutdown that must leave no
# container, process or mount (tests/cells). Minutes long: not part of
# make test, which runs 300.
soak: image build ## 10,000 execs in cells, then a shutdown that must leave nothing (minutes)
	SANDBOXD_CELLS_SOAK=10000 $(GO) test -count=1 -timeout 60m -run 'TestManyRunsThenShutdown' -v ./tests/cells/

# Latency and throughput of cell mode beside container mode, docker run --rm
# and host python3; writes bench/RESULTS.md. About 15-20 minutes on 2 cores:
# not part of make test. BENCH_FLAGS selects and shortens, e.g.
# BENCH_FLAGS='-only cells,warm -duration 20s' (`go run ./bench -h` lists them).
# The pandas workload's floor runs on the host, so the host needs Debian's
# pandas too (the same build the data image has).
BENCH_FLAGS ?=
bench: image build ## latency and throughput benchmarks -> bench/RESULTS.md (15-20 minutes)
	@/usr/bin/python3 -c 'import pandas' 2>/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pandas; }
	$(GO) run ./bench -data -out bench/RESULTS.md $(BENCH_FLAGS)

clean: ## remove bin/
	rm -rf $(BIN)
