//go:build race

package redact

// raceOn: the race detector slows the regexp engine about tenfold; the
// tests that measure shapes over large inputs use smaller ones then.
const raceOn = true
