package main

import (
	"net"
	"testing"
)

// TestStreamAndRoundTrips runs a client against serve on loopback: the
// stream is acknowledged in full and every round trip is timed.
func TestStreamAndRoundTrips(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _ = serve(c) }()
		}
	}()
	var res Result
	if err := stream(lis.Addr().String(), 3<<20+17, &res); err != nil {
		t.Fatal(err)
	}
	if res.MBPerSec <= 0 || res.Seconds <= 0 {
		t.Errorf("stream result %+v", res)
	}
	if err := roundTrips(lis.Addr().String(), 50, &res); err != nil {
		t.Fatal(err)
	}
	if res.RTTP50us <= 0 || res.RTTP99us < res.RTTP50us {
		t.Errorf("round trips %+v", res)
	}
}
