# neonbox-ns: the two commands a fresh Debian machine needs (as root):
#   make demo   install dependencies, build, and run real jailed commands (one committed, one rolled back)
#   make test   install dependencies and run the whole test suite
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin/neonbox-ns
DEMO_WS ?= /tmp/neonbox-demo

VM_BIN ?= bin/vm

# bin/neonbox-ns is linked statically with musl (and a musl build of
# libseccomp, scripts/musl-seccomp.sh): glibc's start-up probes the CPU
# with 68 cpuid instructions, each a VM exit (about 0.6 ms in all on our
# VMs), and a run starts the binary twice, as neonbox-ns and re-exec'd as
# the jail's init. A plain `go build` (glibc, dynamic) works the same,
# slower; the package tests use that one, and `make build LIBC=glibc`
# builds it as bin/neonbox-ns (where Debian's source packages cannot be
# fetched, say).
LIBC ?= musl
MUSL := build/musl
MUSL_GO := CC=musl-gcc CGO_CFLAGS="-O2 -idirafter $(CURDIR)/$(MUSL)/include" \
	PKG_CONFIG_LIBDIR=$(CURDIR)/$(MUSL)/lib/pkgconfig $(GO) build -ldflags '-linkmode external -extldflags "-static"'

.PHONY: all deps build demo test test-vm bench soak lint fuzz clean

all: build

deps:
	@bash scripts/install-deps.sh

build:
ifeq ($(LIBC),glibc)
	$(GO) build -o $(BIN) ./cmd/neonbox-ns
else
	@bash scripts/musl-seccomp.sh $(MUSL)
	$(MUSL_GO) -o $(BIN) ./cmd/neonbox-ns
endif
	$(GO) build -o $(dir $(BIN))neonbox-ns-mcp ./cmd/neonbox-ns-mcp

# A real isolated run: the command sees the workspace through overlayfs,
# writes a file, and the receipt says what it changed.
demo: deps
	@$(MAKE) --no-print-directory build
	@rm -rf $(DEMO_WS) && mkdir -p $(DEMO_WS) && echo "hello from the host" > $(DEMO_WS)/greeting.txt
	@echo "== a run that succeeds: its change is committed"
	$(BIN) exec --workspace $(DEMO_WS) --json -- sh -c 'cat greeting.txt; hostname; id; echo "written in the jail" > result.txt; ls /proc | grep -c "^[0-9]"'
	@echo "== a run that fails: its changes are rolled back"
	-$(BIN) exec --workspace $(DEMO_WS) --receipt $(DEMO_WS).receipt.json -- sh -c 'rm greeting.txt; echo oops > junk.txt; exit 3'
	@echo "exit status 3 above is the command's own; receipt: $(DEMO_WS).receipt.json"
	@ls -l $(DEMO_WS)

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# The whole suite. Privileged tests run as root; with
# NEONBOX_REQUIRE_PRIVILEGED=1 (CI sets it) a missing capability fails
# instead of skipping. integration/ runs bin/neonbox-ns, the static musl
# build (NEONBOX_BIN; without it, it builds its own with go build).
test: deps
	@$(MAKE) --no-print-directory lint build
	NEONBOX_BIN=$(CURDIR)/$(BIN) $(GO) test -count=1 -timeout 15m ./...

# The cgroup, overlay and jail tests again inside a VM booted with
# Debian 12's kernel (6.1, pure cgroup v2), under QEMU's software emulation;
# see integration/vm/README.md. The cross-filesystem commit test needs
# user xattrs on tmpfs, which 6.1 lacks; it runs on the host. Under
# emulation the differential test runs its first 10 seeds.
test-vm: deps
	@mkdir -p $(VM_BIN)
	$(GO) test -c -o $(VM_BIN)/cgroup.test ./cgroup
	$(GO) test -c -o $(VM_BIN)/overlay.test ./overlay
	$(GO) test -c -o $(VM_BIN)/nsjail.test ./nsjail
	integration/vm/run.sh $(VM_BIN)/cgroup.test -test.v -test.count=1
	integration/vm/run.sh $(VM_BIN)/overlay.test -test.count=1 -test.skip TestApplyAcrossFilesystems
	integration/vm/run.sh $(VM_BIN)/nsjail.test -test.v -test.count=1 -test.short -test.skip 'TestDifferential/seed=[1-9][0-9]+$$'

# neonbox-ns against plain exec, unshare and bwrap, interleaved; and the
# Go benchmarks of each phase (benchstat-friendly).
bench: deps
	@$(MAKE) --no-print-directory build
	$(BIN) bench -n 300 -j 2 --pool
	$(GO) test -run '^$$' -bench . -benchtime 200x -count 1 ./cgroup ./nsjail ./overlay ./seccomp ./internal/linux

# 10,000 mixed runs two at a time, then pool calls; checks nothing leaks.
soak: deps
	NEONBOX_SOAK=10000 $(GO) test -count=1 -timeout 60m -run TestSoak -v ./nsjail

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParseSize -fuzztime 30s ./internal/units/
	$(GO) test -run '^$$' -fuzz FuzzPlanCommit -fuzztime 60s ./overlay/
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s ./policies/
	$(GO) test -run '^$$' -fuzz FuzzReceiptJSON -fuzztime 30s ./nsjail/
	$(GO) test -run '^$$' -fuzz FuzzDecodeMessage -fuzztime 30s ./nsjail/

clean:
	rm -rf bin build
