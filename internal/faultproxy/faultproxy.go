// Package faultproxy is a TCP proxy that a test puts between a client and a
// real server (Redis, Postgres) and breaks on demand, so that an outage is
// seen through the real client libraries without touching the server, which
// other tests may share.
package faultproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Mode is how the proxy treats connections.
type Mode int

const (
	// Up relays every connection to the target.
	Up Mode = iota
	// Refuse hangs up every connection at once, open or new, like a server
	// that is down or restarting: clients see their connections reset and
	// their dials answered by a hang-up.
	Refuse
	// Blackhole hangs up the open connections and accepts new ones that it
	// never answers, like a dead host or a partition: clients wait for
	// their own timeouts.
	Blackhole
)

// Proxy relays TCP connections to one target until a test breaks it.
type Proxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int64

	mu    sync.Mutex
	mode  Mode
	conns map[net.Conn]struct{} // open client and target sides, cut when the mode leaves Up
	wg    sync.WaitGroup
}

// Start listens on a free port of 127.0.0.1 and relays to target
// (host:port) until t ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.Set(Refuse)
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's host:port, to give clients instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is how many connections the proxy has accepted so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Set changes the mode; leaving Up cuts every open connection at once.
func (p *Proxy) Set(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
	if m != Up {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// track registers c for cutting if the proxy is in one of modes, and
// otherwise closes it.
func (p *Proxy) track(c net.Conn, modes ...Mode) (Mode, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range modes {
		if p.mode == m {
			p.conns[c] = struct{}{}
			return m, true
		}
	}
	c.Close()
	return p.mode, false
}

// forget unregisters a connection that ended by itself.
func (p *Proxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		p.wg.Go(func() { p.handle(c) })
	}
}

func (p *Proxy) handle(c net.Conn) {
	mode, ok := p.track(c, Up, Blackhole)
	if !ok {
		return
	}
	if mode == Blackhole {
		_, _ = io.Copy(io.Discard, c) // until the client or Set hangs up
		c.Close()
		p.forget(c)
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		p.forget(c)
		return
	}
	if _, ok := p.track(up, Up); !ok {
		c.Close()
		p.forget(c)
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		up.Close()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	c.Close()
	<-done
	p.forget(c, up)
}
