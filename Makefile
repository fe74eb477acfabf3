# ratewarden: `make test` is what CI runs (.ci/run); `make run` starts the service.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOCYCLO ?= github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0
CYCLO_OVER ?= 25
# The modules: the library, the service, the benchmarks against other
# limiters (its tests check every contender's exactness; its benchmarks run
# with `make bench` and `make bench-peers`), one per framework adapter, and
# the side-by-side run against envoyproxy/ratelimit (its dependencies stay
# out of the service's go.mod).
# They are listed longest suite first: make test starts them in this order.
MODULES := . service bench service/internal/peerdiff adapters/fiberlimit adapters/ginlimit adapters/grpclimit adapters/echolimit
# barerls (the bare library behind gRPC, peerdiff's baseline) has no tests of
# its own: it is vetted and linted, and built by peerdiff's tests.
LINT_MODULES := $(MODULES) service/internal/peerdiff/barerls

.PHONY: test check lint vet staticcheck gocyclo fmt-check deps redis bench modules

# test: install what the tests need if missing (redis-server, redis-cli, a
# C compiler for -race), check formatting, vet, staticcheck, then every
# module's suite with the race detector and every benchmark once
# (scripts/test-modules.sh runs TEST_JOBS modules side by side; most tests
# wait on real time, so the suite's wall time is about its CPU time over
# the cores).
#
# TEST_PARALLEL: parallel tests at once in a package (go test's -parallel,
# GOMAXPROCS by default: 2 here). Most parallel tests wait on real time
# (windows passing, retries) rather than compute, so 2 at a time left the
# CPUs idle: the stack's conformance suite took 34 s at 2 and 10 s at 8.
TEST_PARALLEL ?= 8
TEST_JOBS ?= 3
export TEST_PARALLEL TEST_JOBS
test: deps modules fmt-check vet staticcheck
	@GO=$(GO) ./scripts/test-modules.sh $(MODULES)

# check: the quick loop before a commit: formatting, vet, and the library's
# and the service's tests without the race detector, in -short mode (the
# long outage, failover and load scenarios say so and skip; make test runs
# them).
check: fmt-check vet
	@for m in . service; do (cd $$m && $(GO) test -short -count=1 -parallel $(TEST_PARALLEL) ./...) || exit 1; done

# lint: what test checks before the suite, and no function outside tests
# over cyclomatic complexity 25.
lint: fmt-check vet staticcheck gocyclo

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	@for m in $(LINT_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

staticcheck:
	@for m in $(LINT_MODULES); do (cd $$m && $(GO) run $(STATICCHECK) ./...) || exit 1; done

# gocyclo: every module, tests aside; gocyclo exits 1 on any function over
# CYCLO_OVER (25). It walks directories, so the root's run skips the
# nested modules, which their own runs cover.
gocyclo:
	@nested=$$(echo $(filter-out .,$(MODULES)) | tr ' ' '|'); \
	for m in $(LINT_MODULES); do \
		ignore='_test\.go$$'; [ "$$m" = . ] && ignore="$$ignore|^($$nested)/"; \
		(cd $$m && $(GO) run $(GOCYCLO) -over $(CYCLO_OVER) -ignore "$$ignore" .) || { echo "gocyclo: $$m has functions over complexity $(CYCLO_OVER) (split them)"; exit 1; }; \
	done

# deps: the tests start their own redis-server processes; make sure the
# binaries and a C compiler are there (new machines start without them).
deps:
	@./scripts/install-test-deps.sh
redis: deps

# modules: a fresh machine downloads every Go module the modules need on
# the first build, a long silence; say so once before it starts.
modules:
	@for m in $(MODULES); do (cd $$m && GOPROXY=off GOFLAGS=-mod=readonly $(GO) list -deps -test ./... >/dev/null 2>&1) || { echo "First build: downloading Go modules (about two minutes the first time)..."; break; }; done

# bench: every module's Go benchmarks (they start their own redis-server).
bench: deps
	@for m in $(MODULES); do (cd $$m && $(GO) test -run '^$$' -bench . -benchmem ./...) || exit 1; done

# run: the service on the in-memory store (single node) with the example
# config: HTTP API on :8080, Envoy's gRPC rate limit service on :8081.
# RATEWARDEN_REDIS_URL=redis://127.0.0.1:6379 make run shares limits in Redis.
.PHONY: run build
run: modules
	cd service && $(GO) run ./cmd/ratewarden serve --config ../examples/config/ratewarden.yaml

# build: the ratewarden binary in bin/.
build:
	cd service && $(GO) build -o ../bin/ratewarden ./cmd/ratewarden

# bench-peers: ratewarden against go-redis/redis_rate, ulule/limiter and a
# bare INCR+PEXPIRE script on one private redis-server; prints markdown
# tables (about 5 minutes). Longer or narrower runs:
# make bench-peers BENCH_FLAGS="-d 3s -reps 5 -c 64 -workloads 'many keys'"
.PHONY: bench-peers
bench-peers: redis
	cd bench && $(GO) run ./cmd/peers $(BENCH_FLAGS)
