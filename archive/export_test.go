package archive

// WithCommitAnswer returns opts with the answer to the drop's COMMIT replaced by answer's.
func WithCommitAnswer(opts Options, answer func(error) error) Options {
	opts.commitAnswer = answer
	return opts
}
