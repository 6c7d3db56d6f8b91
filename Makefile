# update-agent build and test entry points. `make help` lists them.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.0.0-dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/update-agent
PKGS     := ./...

.PHONY: help build test lint check host-deps e2e e2e-ostree bench bench-smoke demo rpm dist rpm-payload clean

help:
	@echo "build  - build $(BIN)"
	@echo "test   - unit and contract tests (real etcd, real ostree)"
	@echo "check  - lint + test + bench-smoke + e2e: what CI runs"
	@echo "lint   - gofmt and go vet (every build tag)"
	@echo "bench-smoke - each benchmark without a guest, at a small size"
	@echo "e2e    - end-to-end tests in a qemu systemd guest"
	@echo "bench  - staging vs etcd latency, rollouts, lock at scale"
	@echo "demo   - one full gentle update + coordinated reboot, as a timeline"
	@echo "rpm    - build the SRPM and RPM into $(DISTDIR)/ (dist: the source tarball)"
	@echo "rpm-payload - build the RPM and unpack its files under $(PAYLOAD_DIR)"

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/update-agent

# Tools host-deps fetches without installing them system-wide (promtool);
# UA_REQUIRE_TOOLS makes a test that needs one fail instead of skipping.
UA_TOOLS ?= $(HOME)/.cache/update-agent-tools

test: host-deps
	PATH="$(UA_TOOLS)/bin:$$PATH" UA_REQUIRE_TOOLS=1 $(GO) test -count=1 $(PKGS)

# check is the README's test command and what .ci/run runs. host-deps
# installs (only when missing) the Debian packages every target needs.
check: host-deps lint test bench-smoke e2e

host-deps:
	tests/host-deps.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags bench $(PKGS)
	$(GO) vet -tags e2e $(PKGS)
	$(GO) vet -tags e2e_ostree ./tests/e2e/ostree/

# e2e boots a Debian systemd guest under qemu (tests/guest; the image is
# built once into ~/.cache/update-agent-guest, override with UA_GUEST_CACHE).
# The agent goes in as its RPM's payload (tests/e2e/rpmpkg): rpmbuild needed.
# tests/e2e/ostree runs the agent's cycle on the ostree-booted guest (its own
# image, three reboots): the timeout is per package.
# E2E_OSTREE_CHECK are the e2e_ostree tests that check runs too (a guest of
# their own, after the agent's tests): the stand-ins' deploy by
# checksum (the update graph's exact deploy), bootc's download-only
# staging across an unplanned reboot, companion mode pacing an admin's
# rpm-ostree upgrade (about 4 minutes with its boot under TCG), and a
# container-origin host: rebase to an image, the layer diff of a check,
# staging and finalization by digest (about 3 minutes).
E2E_OSTREE_CHECK := TestStandinDeploysByChecksum|TestBootcDownloadOnlySurvivesUnplannedReboot|TestCompanionPacesForeignStaging|TestStandinContainerOrigin

e2e: host-deps
	$(GO) vet -tags e2e ./tests/e2e/...
	$(GO) test -tags e2e -count=1 -timeout 75m -p 1 -v ./tests/e2e/...
	$(GO) test -tags e2e_ostree -count=1 -timeout 40m -v -run '^($(E2E_OSTREE_CHECK))$$' ./tests/e2e/ostree/

# e2e-ostree: ostree's own CLI and the rpm-ostree stand-in alone on the
# ostree-booted guest (the agent's cycle on it is in e2e), then its XFS-root
# variant (an image and a boot of its own). Not part of check.
e2e-ostree: host-deps
	$(GO) test -tags e2e_ostree -count=1 -timeout 90m -p 1 -v ./tests/e2e/ostree/

# bench: staging vs etcd latency in the qemu guest, rolling updates and the
# lock at fleet scale (tests/bench). Not part of CI (bench-smoke is). On 2 idle cores the
# latency plan's XFS half (600 MiB, both disks, a-e, 3 repetitions) took 105 min
# on the ostree guest (BENCH_FS=xfs; 96 min for a, b, d, e and one variant on the small disk),
# its ext4 half (a, b, d) 84 min. Each latency scenario runs BENCH_REPS
# times (default 3), interleaved; the summary shows medians with min-max.
# BENCH_QUICK=1 for a shorter run (small disk, smaller update, fewer
# scenarios and rollouts); BENCH_SCENARIOS and BENCH_DISKS pick the latency
# scenarios, BENCH_ROLLOUTS, BENCH_ROLLOUT_MEMBERS (3,5) and
# BENCH_ROLLOUT_MODES the rollouts, BENCH_LOCK_SESSIONS the lock's size,
# BENCH_IDLE_FOR how long the agent's idle cost is sampled (default 1h).
# Prints the tables; CSV, PNG and markdown go to BENCH_OUT. Any missing piece
# fails the run: no table is printed from partial data.
BENCH_OUT ?= bench-out
BENCH_TIMEOUT ?= 900m

# bench-smoke runs the benchmarks that need no guest (tests/bench/coord,
# tests/bench/idle) at a small size (BENCH_SMOKE=1: the lock with 50
# sessions, 2 rollouts per mode on 3 members, the idle agent for 20 s), so a
# benchmark that breaks fails make check. About two minutes; its figures
# mean nothing.
bench-smoke: host-deps
	BENCH_SMOKE=1 $(GO) test -tags bench -count=1 -p 1 -timeout 10m ./tests/bench/coord/ ./tests/bench/idle/

bench: host-deps
	BENCH_OUT=$(abspath $(BENCH_OUT)) $(GO) test -tags bench -count=1 -p 1 -v -timeout $(BENCH_TIMEOUT) ./tests/bench/coord/ ./tests/bench/idle/ ./tests/bench/latency/
	@echo "results: $(BENCH_OUT)/"

# demo: one full gentle update + coordinated reboot of a qemu guest running
# an etcd member, as a timeline from the guest's journal, then the latency
# table of that run. DEMO_UPDATE_SIZE (default 600MiB) sets the update.
demo: host-deps
	$(GO) run ./tests/bench/cmd/demo

# Packaging (packaging/rpm.sh): dist = source tarball with vendored modules,
# rpm = SRPM + RPM built offline from it (runs the spec's %check; pass
# RPMBUILD_OPTS=--nocheck to skip), rpm-payload = build, then unpack the RPM's
# files under PAYLOAD_DIR (what the guest e2e installs). RPM_VERSION overrides
# the package version (default: the spec's, as a snapshot of HEAD unless HEAD
# is tagged v<Version>).
DISTDIR       ?= dist
RPMBUILD_OPTS ?=
PAYLOAD_DIR   ?= $(DISTDIR)/payload
RPM_VERSION   ?=

dist:
	RPM_VERSION='$(RPM_VERSION)' packaging/rpm.sh dist $(DISTDIR)

rpm:
	RPM_VERSION='$(RPM_VERSION)' packaging/rpm.sh rpm $(DISTDIR) $(RPMBUILD_OPTS)

rpm-payload: rpm
	rm -rf $(PAYLOAD_DIR)
	packaging/rpm.sh payload $$(ls $(DISTDIR)/update-agent-[0-9]*.rpm | grep -v '\.src\.rpm$$') $(PAYLOAD_DIR)

clean:
	rm -rf bin $(DISTDIR) bench-out
