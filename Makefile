# ratewarden: `make test` is what CI runs (.ci/run); `make run` starts the service.
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# bench/ is linted but not part of `make test`: its Go benchmarks and the
# peer comparison run with `make bench` / `make bench-peers`.
MODULES := . service
LINT_MODULES := $(MODULES) $(wildcard bench)

.PHONY: test lint vet staticcheck fmt-check redis bench

# test: install redis-server if missing, check formatting, vet, staticcheck,
# then the whole suite with the race detector in every module.
test: redis fmt-check vet staticcheck
	@for m in $(MODULES); do echo "== go test -race $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 8m ./...) || exit 1; done

lint: fmt-check vet staticcheck

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	@for m in $(LINT_MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

staticcheck:
	@for m in $(LINT_MODULES); do (cd $$m && $(GO) run $(STATICCHECK) ./...) || exit 1; done

# redis: the tests start their own redis-server processes; make sure the
# binary is there (CI machines start without it).
redis:
	@./scripts/install-redis.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# run: the service on the in-memory store (single node) with the example
# config: HTTP API on :8080, Envoy's gRPC rate limit service on :8081.
# RATEWARDEN_REDIS_URL=redis://127.0.0.1:6379 make run shares limits in Redis.
.PHONY: run build
run:
	cd service && $(GO) run ./cmd/ratewarden serve --config ../examples/config/ratewarden.yaml

# build: the ratewarden binary in bin/.
build:
	cd service && $(GO) build -o ../bin/ratewarden ./cmd/ratewarden

# bench-peers: ratewarden against go-redis/redis_rate, ulule/limiter and a
# bare INCR+PEXPIRE script on one private redis-server; prints markdown
# tables (about 4 minutes). Longer or narrower runs:
# make bench-peers BENCH_FLAGS="-d 3s -reps 5 -c 64 -workloads 'many keys'"
.PHONY: bench-peers
bench-peers: redis
	cd bench && $(GO) run ./cmd/peers $(BENCH_FLAGS)
