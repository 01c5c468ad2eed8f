# onceledger — `make help` lists the targets.

# Tool versions, pinned in one place. Tools install into .bin/ on first use.
SQLC_VERSION      := v1.31.1
GOTESTSUM_VERSION := v1.13.0
# The Go release everything is built and tested with, for its security fixes (GO-2026-6859 among them):
# the go command fetches it through the module proxy on first use. .ci/run reads it from here.
GO_TOOLCHAIN      := go1.27.3
export GOTOOLCHAIN := $(GO_TOOLCHAIN)

BIN       := $(CURDIR)/.bin
SQLC      := $(BIN)/sqlc-$(SQLC_VERSION)
GOTESTSUM := $(BIN)/gotestsum-$(GOTESTSUM_VERSION)
ONCELEDGER := $(BIN)/onceledger
# The Go client, generated from the API's document by the oapi-codegen pinned in go.mod (go tool);
# $(call OAPI_CODEGEN,file) writes it to file.
OAPI_CODEGEN = go tool oapi-codegen -config client/oapi-codegen.yaml -o $(1) api/openapi.yaml

VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
GOFLAGS_BUILD := -ldflags "-X main.version=$(VERSION)"

# `make run` works with no configuration: these development defaults apply only when unset (the same
# as internal/config's DevAPIKey and DevWebhookSecret, which serve refuses on a non-loopback ADDR).
DEV_WEBHOOK_SECRET := whsec_dev_onceledger_local_only_not_a_secret
DEV_API_KEY        := onceledger_dev_key_local_only_not_secret
RUN_ADDR           := $(or $(ADDR),127.0.0.1:8080)

.DEFAULT_GOAL := help
.PHONY: help build run test verify generate lint bench demo clean chromium screenshots citus citus-build citus-down test-citus bench-citus

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build the onceledger binary into .bin/
	go build $(GOFLAGS_BUILD) -o $(ONCELEDGER) ./cmd/onceledger

run: build ## migrate and serve on 127.0.0.1:8080 with development defaults (no setup needed)
	@export STRIPE_WEBHOOK_SECRET="$${STRIPE_WEBHOOK_SECRET:-$(DEV_WEBHOOK_SECRET)}" \
	        ONCELEDGER_API_KEYS="$${ONCELEDGER_API_KEYS:-$(DEV_API_KEY)}" \
	        ALLOWED_HOSTS="$${ALLOWED_HOSTS:-127.0.0.1,localhost}" \
	        ADDR="$(RUN_ADDR)"; \
	$(ONCELEDGER) migrate up && \
	echo "" && \
	echo "onceledger is starting on http://$(RUN_ADDR)" && \
	echo "  health:   curl -s http://$(RUN_ADDR)/readyz" && \
	key="$${ONCELEDGER_API_KEYS%%,*}" && \
	echo "  API key:  $${key##*:}   (curl -H 'Authorization: Bearer $${key##*:}' http://$(RUN_ADDR)/v1/accounts/acct_1)" && \
	echo "  webhook:  POST http://$(RUN_ADDR)/webhooks/stripe signed with $${STRIPE_WEBHOOK_SECRET%%,*}" && \
	echo "  stop:     Ctrl-C" && \
	echo "" && \
	exec $(ONCELEDGER) serve

test: $(GOTESTSUM) chromium ## run the whole suite against a real PostgreSQL (found or started) and, for the console, headless Chromium
	$(GOTESTSUM) --format pkgname-and-test-fails -- -race -count=1 -timeout 15m ./...

# The console's browser tests drive Debian's chromium; they fail, never skip, without it.
chromium: ## install Chromium for the console's browser tests when it is missing (apt as root, else says how)
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	  else \
	    echo 'Chromium is missing; install it with: sudo sh -c "apt-get update && apt-get install -y chromium"'; exit 1; \
	  fi; }

screenshots: chromium ## retake the console's screenshots into docs/console/ (the browser test, CONSOLE_SCREENSHOTS=1)
	CONSOLE_SCREENSHOTS=1 go test -count=1 -run '^TestConsoleInBrowser$$' ./internal/console

verify: $(SQLC) ## generated code fresh (sqlc, the client), go vet, migrations up/down/up, a short fuzz of the webhook's signature check and event parsing, JSON decoding and the id formats
	$(SQLC) diff
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && $(call OAPI_CODEGEN,$$tmp/onceledger.gen.go) && \
	  { diff -u client/onceledger.gen.go $$tmp/onceledger.gen.go || { echo 'client/ is stale: run make generate'; exit 1; }; }
	go vet ./...
	go vet -tags citus ./db
	go test -count=1 -run '^TestMigrationsRoundTrip$$' ./db
	go test -run '^$$' -fuzz '^FuzzWebhookBody$$' -fuzztime 10s ./api
	go test -run '^$$' -fuzz '^FuzzParseEvent$$' -fuzztime 10s ./internal/stripeevents
	go test -run '^$$' -fuzz '^FuzzDecodeJSON$$' -fuzztime 10s ./api
	go test -run '^$$' -fuzz '^FuzzIDPattern$$' -fuzztime 10s ./api

# Scale-out (SPEC §15): Citus 13.2.2 from the source kept beside the repository, built into the machine's
# PostgreSQL once; the cluster is three private servers under .data/citus on 127.0.0.1:55440-55442.
CITUS_BUILD := $(CURDIR)/../shared/vendor/citus/build.sh

citus-build: ## build and install Citus into the machine's PostgreSQL when it is missing (as root; about 90 s)
	@test -f "$(CITUS_BUILD)" || { echo "no $(CITUS_BUILD): Citus cannot be built here"; exit 1; }
	@bash "$(CITUS_BUILD)"

citus: build citus-build ## start a local Citus cluster (a coordinator and two workers) and migrate onceledger on it
	@url=$$(go run ./cmd/citus-cluster up) && \
	DATABASE_URL="$$url" $(ONCELEDGER) migrate up && \
	echo "" && \
	echo "onceledger is migrated and distributed on the coordinator: $$url" && \
	echo "  serve:    DATABASE_URL='$$url' make run" && \
	echo "  shards:   psql '$$url' -c 'SELECT table_name, shardid, nodeport FROM citus_shards ORDER BY 1, 2'" && \
	echo "  stop:     make citus-down"

# On one machine the cluster shows what coordination costs (two-phase commits, a claim on another shard),
# not what more machines would gain.
bench-citus: build citus-build ## the webhook, hot API and billing rows of make bench on plain PostgreSQL and on a local Citus cluster, side by side; QUICK=1 for a smoke run
	go run ./cmd/onceledger-bench -bin $(ONCELEDGER) -citus -only webhook,postings,billing $(if $(QUICK),-quick)

citus-down: ## stop the local Citus cluster
	go run ./cmd/citus-cluster down

# The tests that cannot run on a cluster: the table in docs/scaling.md, which says why for each.
CITUS_PLAIN_ONLY := $(shell sed -n 's/^| `\(Test[A-Za-z0-9_]*\)` |.*/\1/p' docs/scaling.md | paste -sd'|' -)

test-citus: $(GOTESTSUM) chromium citus-build ## the whole suite again with every test database on a local Citus cluster, but the tests docs/scaling.md lists (fails, never skips, without Citus)
	@for t in $$(echo '$(CITUS_PLAIN_ONLY)' | tr '|' ' '); do \
	  grep -rqs --include='*_test.go' "^func $$t(" . || { echo "docs/scaling.md lists $$t, which no test file defines"; exit 1; }; \
	done
	@# Started once before the packages run: in parallel, each would race the others to create it.
	go run ./cmd/citus-cluster up >/dev/null
	ONCELEDGER_TEST_BACKEND=citus $(GOTESTSUM) --format pkgname-and-test-fails -- -tags citus -count=1 -timeout 25m \
	  -skip '^($(CITUS_PLAIN_ONLY))$$' ./...

# BenchmarkBilling, BenchmarkBillingHolds and BenchmarkReread are in the table already (onceledger-bench runs them); the rest run after it.
bench: build ## the server next to direct-SQL baselines (one table), then every testing.B benchmark; QUICK=1 for a smoke run
	go run ./cmd/onceledger-bench -bin $(ONCELEDGER) $(if $(QUICK),-quick)
	go test -count=1 -run '^$$' -bench . -skip '^Benchmark(Billing(Holds|Lots)?|Reread)$$' $(if $(QUICK),-benchtime=1x) ./...

generate: $(SQLC) ## regenerate db/internal/dbsqlc from sql/ and client/onceledger.gen.go from api/openapi.yaml (never edit either by hand)
	$(SQLC) generate
	$(call OAPI_CODEGEN,client/onceledger.gen.go)

lint: ## go vet and gofmt
	go vet ./...
	@test -z "$$(gofmt -l . | grep -v '^.bin/')" || (gofmt -l . ; echo 'gofmt: files above need formatting'; exit 1)

demo: build ## run the server on a scratch database and show every guarantee at work (under a minute)
	$(ONCELEDGER) demo

clean: ## remove built binaries (keeps the private database in .data/)
	rm -f $(ONCELEDGER)

$(SQLC):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) CGO_ENABLED=1 go install github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
	mv $(BIN)/sqlc $@

$(GOTESTSUM):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) go install gotest.tools/gotestsum@$(GOTESTSUM_VERSION)
	mv $(BIN)/gotestsum $@
