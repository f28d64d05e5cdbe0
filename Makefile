# make run   the whole service with the demo Kentucky catalog (prints a demo key and a curl line)
# make test  every test, against a real PostgreSQL (a private one when DATABASE_URL is unset)
# make bench benchmarks

SHELL := /bin/bash
GO ?= go
BIN := bin/kyapi
# A private PostgreSQL from the system binaries unless DATABASE_URL points elsewhere. (Assigned,
# then exported: `export X=$(...)` would hide a failure of scripts/devdb.sh from set -e.)
DB_URL = $${DATABASE_URL:-$$(scripts/devdb.sh url)}

export ADMIN_TOKEN ?= dev-admin-token
export DATA_DIR ?= ./data
export CANONICAL_BASE_URL ?= http://localhost:8080

.PHONY: build run test vet bench db db-stop clean

build:
	$(GO) build -o $(BIN) ./cmd/kyapi

run: build
	@scripts/packages.sh run
	@set -e; DATABASE_URL=$(DB_URL); export DATABASE_URL; \
	$(BIN) migrate; \
	$(BIN) demo-data; \
	admin=$${ADMIN_ADDR:-127.0.0.1:8081}; case $$admin in :*) admin=127.0.0.1$$admin;; esac; \
	echo "Admin API on $$admin unless serve logs that it is taken (token: $$ADMIN_TOKEN). Console: http://$$admin/console/ (sign in with the token). Metrics: http://$$admin/metrics. Ctrl-C stops the service."; \
	exec $(BIN) serve

test: vet
	@scripts/packages.sh test
	@set -e; DATABASE_URL=$(DB_URL); export DATABASE_URL; \
	$(GO) test -count=1 -timeout 30m ./...

vet:
	$(GO) vet ./...

bench:
	bash bench/run.sh

db:
	@scripts/devdb.sh url

db-stop:
	@scripts/devdb.sh stop

clean:
	rm -rf bin data
