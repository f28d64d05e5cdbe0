package eventstore

import "time"

// SetCommitOutcomeWait shortens how long WithTx looks for a lost commit's outcome; the returned
// function puts it back.
func SetCommitOutcomeWait(d time.Duration) func() {
	was := commitOutcomeWait
	commitOutcomeWait = d
	return func() { commitOutcomeWait = was }
}
