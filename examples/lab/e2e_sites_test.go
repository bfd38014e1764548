package lab_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/examples/lab/labnet"
)

// pairSize is what each transfer of the three-site lab fetches.
const pairSize = 32 << 20

// TestLabThreeSites brings up the lab with a third site on the emulated
// WAN (sos-3sites.hcl, what `lab up --sites 3` runs) and makes one
// transfer across each pair of sites, each under its own whitelist:
// byte-identical, carried by the two sites' agents, the server seeing the
// client's address.
func TestLabThreeSites(t *testing.T) {
	requireE2E(t)
	sos, wanem := buildBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	lab, err := labnet.Up(ctx, labnet.Options{
		Config:       "sos-3sites.hcl",
		Sosappliance: sos,
		Wanem:        wanem,
		WAN:          labnet.DefaultWAN,
		Progress:     logWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range lab.Nodes() {
				t.Logf("--- %s log (tail) ---\n%s", n.Name, lab.LogTail(n.Name, 25))
			}
		}
		if err := lab.Down(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	files := newFileServer(t)
	want := sha256.New()
	f, err := os.Open(files.bigPath)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.CopyN(want, f, pairSize)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	wantSum := want.Sum(nil)

	hosts := []labnet.Host{labnet.Client, labnet.Server, labnet.HostC}
	agents := []labnet.Host{labnet.AgentA, labnet.AgentB, labnet.AgentC}
	addrs := []netip.Addr{labnet.ClientAddr, labnet.ServerAddr, labnet.HostCAddr}
	for i := range hosts {
		ln, err := lab.Listen(hosts[i], "tcp", netip.AddrPortFrom(addrs[i], httpPort).String())
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: files, ReadHeaderTimeout: 30 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
	}
	for i := range hosts {
		from, to := i, (i+1)%len(hosts)
		t.Run(fmt.Sprintf("%s to %s", hosts[from], hosts[to]), func(t *testing.T) {
			server := netip.AddrPortFrom(addrs[to], httpPort)
			seen := files.watch("/big")
			cmd := lab.Command(ctx, hosts[from], "curl", "-sS", "--fail", "-r", fmt.Sprintf("0-%d", pairSize-1), "-o", "-",
				"http://"+server.String()+"/big")
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
			if remote.Addr() != addrs[from] {
				t.Errorf("server saw %s, want the client's address %s", remote, addrs[from])
			}
			for _, c := range []struct {
				agent       labnet.Host
				local, peer netip.AddrPort
			}{{agents[from], server, remote}, {agents[to], remote, server}} {
				out, err := lab.Run(ctx, c.agent, "ss", "-Htn")
				if err != nil {
					t.Fatal(err)
				}
				if !hasSocket(out, c.local, c.peer) {
					t.Errorf("%s has no socket %s -> %s: the transfer was not carried by the agents of both sites:\n%s", c.agent, c.local, c.peer, out)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("curl: %v", err)
			}
			if n != pairSize || string(sum.Sum(nil)) != string(wantSum) {
				t.Fatalf("got %d bytes, sha256 %x; want %d bytes, %x", n, sum.Sum(nil), pairSize, wantSum)
			}
			elapsed := time.Since(start)
			t.Logf("%d MiB %s -> %s byte-identical in %.1f s (%s)", pairSize>>20, remote, server, elapsed.Seconds(),
				labnet.FormatRate(float64(pairSize)*8/elapsed.Seconds()))
		})
	}
}
