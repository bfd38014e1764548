package lab_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

// rangePort is inside whitelist "range" of sos.hcl (50000-50063) and not
// the first port of any of its value/mask blocks.
const rangePort = 50031

// http6Port is whitelist "http6" of sos.hcl: the server over IPv6.
const http6Port = 8081

// rangeSize is how much of the big file the range-port transfer fetches.
const rangeSize = 128 << 20

// serveFilesOn serves the lab's files on the server at addr too.
func serveFilesOn(t *testing.T, lab *labnet.Lab, addr netip.AddrPort, files *fileServer) {
	t.Helper()
	ln, err := lab.Listen(labnet.Server, "tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: files, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
}

// testRangePortDownload fetches the first 128 MiB of the big file from
// server:port, a port inside a whitelisted range (the switches steer it by
// a value/mask flow, the agent diverts it through an nftables interval
// set) or an IPv6 server (ipv6_src/ipv6_dst flows, TPROXY in table ip6):
// the agents carry it byte-identical, the server seeing the client.
func testRangePortDownload(ctx context.Context, t *testing.T, lab *labnet.Lab, files *fileServer, client, server netip.Addr, port int) {
	want := sha256.New()
	f, err := os.Open(files.bigPath)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.CopyN(want, f, rangeSize)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	seen := files.watch("/big")
	cmd := lab.Command(ctx, labnet.Client, "curl", "-sS", "--fail", "-g", "-r", fmt.Sprintf("0-%d", rangeSize-1), "-o", "-",
		"http://"+netip.AddrPortFrom(server, uint16(port)).String()+"/big")
	sum := sha256.New()
	var n countWriter
	cmd.Stdout = io.MultiWriter(sum, &n)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var remote netip.AddrPort
	select {
	case remote = <-seen:
	case err := <-done:
		t.Fatalf("curl ended before the server saw the request: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the server saw no request within 30 s")
	}
	if remote.Addr() != client {
		t.Errorf("server saw %s, want the client's address %s", remote, client)
	}
	if err := carriedTo(ctx, lab, remote, netip.AddrPortFrom(server, uint16(port))); err != nil {
		t.Errorf("transfer to %s not carried by the agents: %v", netip.AddrPortFrom(server, uint16(port)), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("curl: %v", err)
	}
	if int64(n) != rangeSize || hex.EncodeToString(sum.Sum(nil)) != hex.EncodeToString(want.Sum(nil)) {
		t.Fatalf("downloaded %d bytes, sha256 %x; want %d bytes, %x", n, sum.Sum(nil), rangeSize, want.Sum(nil))
	}
	elapsed := time.Since(start)
	t.Logf("%d MiB from %s byte-identical in %.1f s (%s), server saw %s", rangeSize>>20, netip.AddrPortFrom(server, uint16(port)),
		elapsed.Seconds(), labnet.FormatRate(float64(rangeSize)*8/elapsed.Seconds()), remote)
}
