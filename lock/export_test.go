package lock

// SetSeqLimits lowers the sequence-wrap thresholds for a test and returns
// a function restoring them.
func SetSeqLimits(drain, refuse int64) func() {
	d, r := seqDrain, seqRefuse
	seqDrain, seqRefuse = drain, refuse
	return func() { seqDrain, seqRefuse = d, r }
}
