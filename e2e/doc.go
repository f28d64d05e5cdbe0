// Package e2e holds the end-to-end tests: they build cmd/kyapi once, run real `kyapi serve`
// processes over loopback HTTP against real PostgreSQL databases, and check what an
// operator would see under load, crashes, database outages, TLS and logging. See
// docs/operations.md for the behaviour they pin down.
package e2e
