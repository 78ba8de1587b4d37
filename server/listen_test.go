package server

import "testing"

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7777": true, "127.1.2.3:80": true, "[::1]:7777": true, "localhost:7777": true, "LOCALHOST:1": true,
		"0.0.0.0:7777": false, ":7777": false, "[::]:7777": false, "192.168.1.5:7777": false, "example.com:7777": false,
	} {
		got, err := IsLoopback(addr)
		if err != nil || got != want {
			t.Errorf("IsLoopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := IsLoopback("7777"); err == nil {
		t.Error("an address without a port is accepted")
	}
	if _, err := Listen("0.0.0.0:0", false); err == nil {
		t.Error("Listen on every interface without allowRemote succeeded")
	}
	ln, err := Listen("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}
