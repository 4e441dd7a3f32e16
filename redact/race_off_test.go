//go:build !race

package redact

const raceOn = false
