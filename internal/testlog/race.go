//go:build race

package testlog

const raceEnabled = true
