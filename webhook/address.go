package webhook

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

// ErrPrivate is returned for an address inside a network Sluice never
// posts to: a customer's URL must not reach the operator's own machines.
var ErrPrivate = errors.New("webhook: address not allowed")

// metadata are the cloud providers' instance metadata addresses, named as
// such in refusals (most also fall in a range refused below).
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

// refusedRanges are the networks that are not the public internet, beyond
// what netip's predicates name.
var refusedRanges = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast"},
}

// Embedded IPv4 in IPv6: NAT64 and 6to4 addresses reach the IPv4 address
// they carry, so they are judged as it.
var (
	nat64  = []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96"), netip.MustParsePrefix("64:ff9b:1::/48")}
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// Refused says why Sluice does not connect to a ("loopback", "private",
// ...), or "" when a is a public address. An IPv4-mapped IPv6 address is
// judged as its IPv4 address.
func Refused(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		for _, p := range nat64 {
			if p.Contains(a) {
				return Refused(netip.AddrFrom4([4]byte(b[12:16])))
			}
		}
		if sixTo4.Contains(a) {
			return Refused(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	for _, m := range metadata {
		if a == m {
			return "cloud metadata"
		}
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast():
		return "multicast"
	}
	for _, r := range refusedRanges {
		if r.prefix.Contains(a) {
			return r.why
		}
	}
	return ""
}

// refusal is the error for a refused address.
func refusal(a netip.Addr, why string) error {
	return fmt.Errorf("%w: %s is a %s address (SLUICE_WEBHOOK_ALLOW_PRIVATE=true allows it, for development only)", ErrPrivate, a.Unmap(), why)
}

// control runs after resolution, as the kernel is about to connect to
// address: the one place no resolver, rebinding or redirect can get past.
func (s *Sender) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot read %q as an address", ErrPrivate, address)
	}
	if why := Refused(ap.Addr()); why != "" && !s.opts.AllowPrivate {
		return refusal(ap.Addr(), why)
	}
	return nil
}
