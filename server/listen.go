package server

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Listen opens a TCP listener on addr (host:port). An address that is not
// loopback-only (an empty host, 0.0.0.0, a LAN address, a host name other
// than localhost) is refused unless allowRemote: the API acts on the
// machine, and the token is the only thing guarding it.
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	if !allowRemote {
		ok, err := IsLoopback(addr)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("listen %s: not a loopback address; other machines could reach the API (pass --allow-remote to bind it anyway, and put TLS in front)", addr)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// IsLoopback reports whether addr (host:port) binds loopback interfaces
// only: localhost, 127.0.0.0/8 or ::1.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("address %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false, nil // a host name (or empty: every interface)
	}
	return ip.IsLoopback(), nil
}
