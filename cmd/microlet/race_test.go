//go:build race

package main

// raceEnabled builds the microlet binary under test with -race too.
const raceEnabled = true
