package lab_test

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	lab := upLab(ctx, t, labnet.Options{Config: "sos-3sites.hcl", Sosappliance: sos, Wanem: wanem, WAN: labnet.DefaultWAN})
	// Every leg's emulator queues the path's bandwidth-delay product, as
	// the two-site lab's one does, not its own leg's half of it.
	bdp := labnet.DefaultWAN.Rate / 8 * labnet.DefaultWAN.RTT.Milliseconds() / 1000
	for _, leg := range []string{"a", "b", "c"} {
		log, err := os.ReadFile(filepath.Join(lab.LogDir(), "wanem-"+leg+".log"))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(" queue=%dB ", bdp); !strings.Contains(string(log), want) {
			t.Errorf("wanem-%s runs without%s:\n%s", leg, want, log)
		}
		// and loses at random such that the two legs a frame crosses
		// lose the lab's loss together.
		_, rest, _ := strings.Cut(string(log), " loss=")
		field, _, _ := strings.Cut(rest, " ")
		loss, err := strconv.ParseFloat(field, 64)
		if path := 1 - (1-loss)*(1-loss); err != nil || math.Abs(path-labnet.DefaultWAN.Loss) > 1e-12 {
			t.Errorf("wanem-%s runs with loss=%q: two legs lose %g, want %g", leg, field, path, labnet.DefaultWAN.Loss)
		}
	}
	files := newFileServer(t)
	wantSum := bigPrefixSum(t, files, pairSize)

	hosts := []labnet.Host{labnet.Client, labnet.Server, labnet.HostC}
	agents := []labnet.Host{labnet.AgentA, labnet.AgentB, labnet.AgentC}
	addrs := []netip.Addr{labnet.ClientAddr, labnet.ServerAddr, labnet.HostCAddr}
	for i := range hosts {
		serveFilesOn(t, lab, hosts[i], netip.AddrPortFrom(addrs[i], httpPort), files)
	}
	for i := range hosts {
		from, to := i, (i+1)%len(hosts)
		t.Run(fmt.Sprintf("%s to %s", hosts[from], hosts[to]), func(t *testing.T) {
			server := netip.AddrPortFrom(addrs[to], httpPort)
			d := startDownload(ctx, t, lab, hosts[from], files, "-r", fmt.Sprintf("0-%d", pairSize-1), "-o", "-",
				"http://"+server.String()+"/big")
			remote := d.remote
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
			if err := d.wait(); err != nil {
				t.Fatalf("curl: %v", err)
			}
			if d.n != pairSize || string(d.sum.Sum(nil)) != string(wantSum) {
				t.Fatalf("got %d bytes, sha256 %x; want %d bytes, %x", d.n, d.sum.Sum(nil), pairSize, wantSum)
			}
			elapsed := time.Since(d.start)
			t.Logf("%d MiB %s -> %s byte-identical in %.1f s (%s)", pairSize>>20, remote, server, elapsed.Seconds(),
				labnet.FormatRate(float64(pairSize)*8/elapsed.Seconds()))
		})
	}
}
