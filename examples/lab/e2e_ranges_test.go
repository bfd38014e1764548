package lab_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
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

// testRangePortDownload fetches the first 128 MiB of the big file from
// server:port, a port inside a whitelisted range (the switches steer it by
// a value/mask flow, the agent diverts it through an nftables interval
// set) or an IPv6 server (ipv6_src/ipv6_dst flows, TPROXY in table ip6):
// the agents carry it byte-identical, the server seeing the client.
func testRangePortDownload(ctx context.Context, t *testing.T, lab *labnet.Lab, files *fileServer, client, server netip.Addr, port int) {
	want := bigPrefixSum(t, files, rangeSize)
	d := startDownload(ctx, t, lab, labnet.Client, files, "-g", "-r", fmt.Sprintf("0-%d", rangeSize-1), "-o", "-",
		"http://"+netip.AddrPortFrom(server, uint16(port)).String()+"/big")
	remote := d.remote
	if remote.Addr() != client {
		t.Errorf("server saw %s, want the client's address %s", remote, client)
	}
	if err := carriedTo(ctx, lab, remote, netip.AddrPortFrom(server, uint16(port))); err != nil {
		t.Errorf("transfer to %s not carried by the agents: %v", netip.AddrPortFrom(server, uint16(port)), err)
	}
	if err := d.wait(); err != nil {
		t.Fatalf("curl: %v", err)
	}
	if int64(d.n) != rangeSize || hex.EncodeToString(d.sum.Sum(nil)) != hex.EncodeToString(want) {
		t.Fatalf("downloaded %d bytes, sha256 %x; want %d bytes, %x", d.n, d.sum.Sum(nil), rangeSize, want)
	}
	elapsed := time.Since(d.start)
	t.Logf("%d MiB from %s byte-identical in %.1f s (%s), server saw %s", rangeSize>>20, netip.AddrPortFrom(server, uint16(port)),
		elapsed.Seconds(), labnet.FormatRate(float64(rangeSize)*8/elapsed.Seconds()), remote)
}
