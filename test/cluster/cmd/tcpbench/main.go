// Command tcpbench measures TCP between two pods: run `tcpbench server` in
// one, `tcpbench client -addr IP:PORT` in another. The client first
// streams -bytes to the server and reports the throughput the server
// acknowledges, then sends -rtts one-byte requests, each answered by one
// byte, and reports the round trips' percentiles. It prints one JSON
// object. BenchmarkPodNetwork (package test/cluster) runs it on a cluster.
//
//	tcpbench server [-port 5201]
//	tcpbench client -addr IP:PORT [-bytes 268435456] [-rtts 2000]
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"time"
)

// Each connection opens with one byte naming what it is for.
const (
	modeStream byte = 's'
	modeRTT    byte = 'r'
)

// Result is what the client prints.
type Result struct {
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	MBPerSec   float64 `json:"mb_per_s"`
	RTTs       int     `json:"rtts"`
	RTTP50us   float64 `json:"rtt_p50_us"`
	RTTP90us   float64 `json:"rtt_p90_us"`
	RTTP99us   float64 `json:"rtt_p99_us"`
	RTTMeanus  float64 `json:"rtt_mean_us"`
	RemoteAddr string  `json:"remote"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: tcpbench server|client [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "server":
		err = server(os.Args[2:])
	case "client":
		err = client(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q (server or client)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcpbench:", err)
		os.Exit(1)
	}
}

func server(args []string) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	port := fs.Int("port", 5201, "TCP port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", fmt.Sprintf(":%d", *port))
	if err != nil {
		return err
	}
	fmt.Println("tcpbench: serving on", lis.Addr())
	for {
		c, err := lis.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if err := serve(c); err != nil && !errors.Is(err, io.EOF) {
				fmt.Fprintln(os.Stderr, "tcpbench:", c.RemoteAddr(), err)
			}
		}()
	}
}

// serve answers one connection: a stream is read to its end and its byte
// count written back (8 bytes, big-endian); an RTT connection echoes each
// byte.
func serve(c net.Conn) error {
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		return err
	}
	switch mode[0] {
	case modeStream:
		var size [8]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return err
		}
		n, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint64(size[:])))
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint64(size[:], uint64(n))
		_, err = c.Write(size[:])
		return err
	case modeRTT:
		var b [1]byte
		for {
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return err
			}
			if _, err := c.Write(b[:]); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown mode byte %q", mode[0])
	}
}

func client(args []string) error {
	fs := flag.NewFlagSet("client", flag.ContinueOnError)
	addr := fs.String("addr", "", "server IP:PORT")
	bytes := fs.Int64("bytes", 256<<20, "bytes to stream")
	rtts := fs.Int("rtts", 2000, "one-byte round trips")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *addr == "" || *bytes <= 0 || *rtts <= 0 {
		return errors.New("client: -addr is required; -bytes and -rtts must be positive")
	}
	res := Result{Bytes: *bytes, RTTs: *rtts, RemoteAddr: *addr}
	if err := stream(*addr, *bytes, &res); err != nil {
		return err
	}
	if err := roundTrips(*addr, *rtts, &res); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

func stream(addr string, size int64, res *Result) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	w := bufio.NewWriterSize(c, 256<<10)
	hdr := make([]byte, 9)
	hdr[0] = modeStream
	binary.BigEndian.PutUint64(hdr[1:], uint64(size))
	start := time.Now()
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	for left := size; left > 0; {
		n := int64(len(buf))
		if left < n {
			n = left
		}
		if _, err := w.Write(buf[:n]); err != nil {
			return err
		}
		left -= n
	}
	if err := w.Flush(); err != nil {
		return err
	}
	var ack [8]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil {
		return fmt.Errorf("stream: no acknowledgement: %w", err)
	}
	if got := int64(binary.BigEndian.Uint64(ack[:])); got != size {
		return fmt.Errorf("stream: server received %d bytes of %d", got, size)
	}
	res.Seconds = time.Since(start).Seconds()
	res.MBPerSec = float64(size) / (1 << 20) / res.Seconds
	return nil
}

func roundTrips(addr string, n int, res *Result) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if _, err := c.Write([]byte{modeRTT}); err != nil {
		return err
	}
	d := make([]time.Duration, n)
	var total time.Duration
	b := []byte{'x'}
	for i := range d {
		start := time.Now()
		if _, err := c.Write(b); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return err
		}
		d[i] = time.Since(start)
		total += d[i]
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	us := func(q float64) float64 { return float64(d[int(q*float64(n-1))]) / 1e3 }
	res.RTTP50us, res.RTTP90us, res.RTTP99us = us(0.50), us(0.90), us(0.99)
	res.RTTMeanus = float64(total) / float64(n) / 1e3
	return nil
}
