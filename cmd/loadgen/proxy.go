package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"
)

// servedProxy is the in-process reverse proxy of -serve-proxy.
type servedProxy struct {
	base     string // base URL to load through it, e.g. http://127.0.0.1:9091/v1
	upstream string
	srv      *http.Server
}

// startProxy starts a bare httputil.ReverseProxy as -serve-proxy asks: on
// ADDR (host defaults to 127.0.0.1), to UPSTREAM (default: the origin of
// -direct). It is the floor Sluice's overhead is compared with, so its only
// tuning is what any proxy under load needs: enough idle connections to the
// upstream to reuse them, and flushing at once for streams.
func startProxy(cfg config) (*servedProxy, error) {
	addr, upstream, _ := strings.Cut(cfg.serveProxy, "=")
	if upstream == "" {
		d, err := url.Parse(cfg.direct)
		if err != nil {
			return nil, err
		}
		upstream = d.Scheme + "://" + d.Host
	}
	if err := checkURL(upstream, cfg.allowRemote); err != nil {
		return nil, err
	}
	up, err := url.Parse(strings.TrimSuffix(upstream, "/"))
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("ADDR %q: %w", addr, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if !cfg.allowRemote && !isLoopback(host) {
		return nil, fmt.Errorf("ADDR %q is not a loopback address (use -allow-remote)", addr)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, err
	}

	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(up) },
		Transport: &http.Transport{
			DialContext:         dialer.DialContext,
			MaxIdleConnsPerHost: 4096,
			IdleConnTimeout:     90 * time.Second,
		},
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0), // failures show as 502s in the table
	}
	p := &servedProxy{
		upstream: up.String(),
		srv:      &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second},
	}
	go func() { _ = p.srv.Serve(ln) }()

	// Load the proxy under the same path as -direct: a request for
	// <base>/chat/completions reaches <direct>/chat/completions.
	p.base = "http://" + ln.Addr().String()
	if d, err := url.Parse(cfg.direct); err == nil && cfg.direct != "" {
		if rest, ok := strings.CutPrefix(d.Path, up.Path); ok && d.Host == up.Host {
			p.base += rest
		}
	}
	return p, nil
}

// stop shuts the proxy down, cutting off whatever is still in flight after a
// moment.
func (p *servedProxy) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = p.srv.Close()
	}
}
