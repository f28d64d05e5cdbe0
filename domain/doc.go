// Package domain holds the business rules of the metering platform and the catalog: accounts,
// API keys and their lifecycle, credits and purchases, prices, same-day deduplication and the
// charge decision. It does no I/O; time always comes in as a parameter.
package domain
