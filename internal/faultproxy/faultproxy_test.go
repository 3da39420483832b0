package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// echo serves lines back on a free port until t ends.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends a line on c and reads it back within a deadline.
func roundTrip(c net.Conn, r *bufio.Reader) error {
	c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("echoed " + line)
	}
	return err
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// TestModes: relayed while up; refused cuts the open connection and hangs
// up on new ones; a blackhole accepts and never answers; up again relays.
func TestModes(t *testing.T) {
	p := Start(t, echo(t))
	open, r := dial(t, p)
	if err := roundTrip(open, r); err != nil {
		t.Fatalf("up: %v", err)
	}

	p.Set(Refuse)
	if err := roundTrip(open, r); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("refuse: the open connection got %v, want it cut", err)
	}
	fresh, fr := dial(t, p)
	if err := roundTrip(fresh, fr); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("refuse: a new connection got %v, want a hang-up", err)
	}

	p.Set(Blackhole)
	held, hr := dial(t, p)
	if err := roundTrip(held, hr); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackhole: got %v, want no answer", err)
	}

	p.Set(Up)
	again, ar := dial(t, p)
	if err := roundTrip(again, ar); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if got := p.Accepted(); got != 4 {
		t.Fatalf("Accepted() = %d, want 4", got)
	}
}
