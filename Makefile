# Airlock: build, demo, test, bench, lint. Everything that needs root says so.
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
# Everything, tests included, builds without cgo, as the shipped static binary does:
# with cgo, the psx package (go-landlock's, for all-thread system calls) swaps in a C
# implementation that wraps pthread_create, and test binaries linked with it crash.
export CGO_ENABLED := 0

.PHONY: build demo test test-short bench lint deps runsc sdk-cross install install-service

# bin/airlock is the CLI; bin/airlockd the daemon, which airlock serve runs; bin/airlock-agent
# the agent, which the daemon installs into sandboxes.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-X github.com/airlockhq/airlock/internal/version.Version=$$(git describe --tags --always --dirty 2>/dev/null || echo dev)" -o bin/ ./cmd/...

deps:
	bash scripts/deps.sh

# The binaries on PATH: /usr/local/bin/airlock and, beside it, airlockd and airlock-agent
# (root). PREFIX=/usr or DESTDIR work as usual.
PREFIX ?= /usr/local
install: build
	install -D -m 0755 bin/airlock $(DESTDIR)$(PREFIX)/bin/airlock
	install -D -m 0755 bin/airlockd $(DESTDIR)$(PREFIX)/bin/airlockd
	install -D -m 0755 bin/airlock-agent $(DESTDIR)$(PREFIX)/bin/airlock-agent
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/airlock/README.md
	@echo "installed $(DESTDIR)$(PREFIX)/bin/airlock, airlockd and airlock-agent"

# The daemon as a systemd service, started now and at boot (root).
install-service: install
	install -D -m 0644 dist/airlock.service $(DESTDIR)/etc/systemd/system/airlock.service
	sed -i 's|/usr/local/|$(PREFIX)/|g' $(DESTDIR)/etc/systemd/system/airlock.service
	if [ -z "$(DESTDIR)" ]; then systemctl daemon-reload && systemctl enable --now airlock.service && \
		echo "airlock.service is enabled and started; its log: journalctl -u airlock"; fi

# gVisor's runsc, the second runtime, built static from the Go module proxy (root).
runsc:
	bash scripts/runsc.sh

# Builds, starts the daemon on its embedded default and runs a Python sandbox (root).
demo:
	bash scripts/demo.sh

# The whole suite: unit tests and the ones that drive real runc, overlayfs and cgroups (root).
test: deps runsc sdk-cross
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v /internal/runtime/gvisor)
	cd deploy && $(GO) test -count=1 ./...
	$(GO) test -count=1 -timeout 10m ./internal/runtime/gvisor/
	AIRLOCK_TEST_RUNTIME=runsc $(GO) test -count=1 -timeout 10m -run '$(RUNSC_TESTS)' ./internal/integration/
	bash scripts/test-rootless.sh

# The gVisor tests run after the rest, never beside them: runsc's systrap platform keeps
# cores busy, and timing-sensitive tests (output bounds, netlink under load) flaked
# beside it on two cores.
# The lifecycle, snapshot, persistence and network tests again, on runsc by default,
# and what only runsc has: the suspend that keeps memory (TestMemorySuspend, …), memory
# snapshots and forks into running clones (TestMemorySnapshotFork, TestMemorySnapshotSecret,
# TestMemoryForkCount); TestMemory names them all.
RUNSC_TESTS = TestSecretsAndSessionCredential|TestPersistenceMatrix|TestSnapshotRestoreFork|TestNetworkModes|TestNetworkPorts|TestCrashRecovery|TestAPI|TestMemory

# The public Go SDK builds on every OS the SDK's users run.
sdk-cross:
	GOOS=darwin $(GO) build ./client
	GOOS=windows $(GO) build ./client

test-short:
	$(GO) test -count=1 -short ./...

bench: build
	bash bench/run.sh

# staticcheck comes through the Go module proxy at a pinned version.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint: sdk-cross
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) test -count=1 ./internal/layers
	$(GO) run $(STATICCHECK) ./...
