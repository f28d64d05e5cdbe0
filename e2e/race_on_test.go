//go:build race

package e2e

// raceBuild: this test binary runs under the race detector, so the kyapi binary it starts is
// built with -race too, and a race in a child process is reported (raceReported).
const raceBuild = true
