package testenv

import (
	"testing"
	"time"
)

// pollInterval is how often Eventually asks again.
const pollInterval = 100 * time.Millisecond

// Eventually calls f until it returns nil, failing t with what and f's last
// error when limit passes first. Limits are patience for a loaded machine,
// never a measurement.
func Eventually(t testing.TB, what string, limit time.Duration, f func() error) {
	t.Helper()
	EventuallyEvery(t, what, limit, pollInterval, f)
}

// EventuallyEvery is Eventually asking every interval, for checks too costly
// to repeat ten times a second (a docker-compose ps, a scrape of a busy
// API server).
func EventuallyEvery(t testing.TB, what string, limit, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s: %v", what, limit, err)
		}
		time.Sleep(interval)
	}
}
