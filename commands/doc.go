// Package commands holds one handler per command of the metering platform: open an account,
// issue and revoke keys, record purchases and bonus grants, and charge a request. Each loads
// the always-current write model under a row lock, asks the domain, and appends the events
// together with the write-model change in one transaction.
package commands
