package tuning

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sosappliance/sosappliance/host/item"
	"github.com/sosappliance/sosappliance/internal/portrange"
	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// divertTopology: this (fresh) namespace is the agent, with sosa0
// 10.9.1.1/24; a named client namespace has sosc0 10.9.1.10/24 routed
// through the agent. It returns the client namespace's name and handle.
func divertTopology(t *testing.T) (string, netns.NsHandle) {
	t.Helper()
	client := fmt.Sprintf("sosdivc%d", os.Getpid())
	run(t, "ip", "netns", "add", client)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", client).Run() })
	run(t, "ip", "link", "add", "sosa0", "type", "veth", "peer", "name", "sosc0", "netns", client)
	run(t, "ip", "addr", "add", "10.9.1.1/24", "dev", "sosa0")
	run(t, "ip", "link", "set", "sosa0", "up")
	run(t, "ip", "link", "set", "lo", "up")
	run(t, "ip", "-n", client, "addr", "add", "10.9.1.10/24", "dev", "sosc0")
	run(t, "ip", "-n", client, "link", "set", "sosc0", "up")
	run(t, "ip", "-n", client, "route", "add", "default", "via", "10.9.1.1")
	ns, err := netns.GetFromName(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return client, ns
}

// transparentListener listens on addr with IP_TRANSPARENT, as the
// relay's transparent listener does: it accepts connections diverted to
// it for addresses that are not the host's. Closed at the test's end.
func transparentListener(t *testing.T, addr string) net.Listener {
	t.Helper()
	return transparentListenerOn(t, "tcp4", addr)
}

// transparentListenerOn is transparentListener for network "tcp4" or
// "tcp6" (IPV6_TRANSPARENT).
func transparentListenerOn(t *testing.T, network, addr string) net.Listener {
	t.Helper()
	level, opt := syscall.SOL_IP, syscall.IP_TRANSPARENT
	if network == "tcp6" {
		level, opt = syscall.SOL_IPV6, unix.IPV6_TRANSPARENT
	}
	lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), level, opt, 1)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// echoWithLocalAddr is a transparent listener on :9876 echoing lines
// prefixed by the local address the connection was accepted on.
func echoWithLocalAddr(t *testing.T) {
	t.Helper()
	ln := transparentListener(t, "0.0.0.0:9876")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(60 * time.Second))
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "%s %s", c.LocalAddr(), line)
				}
			}()
		}
	}()
}

func applySpec(t *testing.T, spec item.SteeringSpec) {
	t.Helper()
	items, err := spec.Items()
	if err != nil {
		t.Fatal(err)
	}
	exs := Executors("/")
	for _, it := range items {
		if err := exs[it.Kind].Apply(context.Background(), it); err != nil {
			t.Fatalf("apply %s: %v", it.ID(), err)
		}
	}
}

func divertSpec(ports ...portrange.Range) item.SteeringSpec {
	return item.SteeringSpec{
		Interface:  "sosa0",
		ListenPort: 9876,
		Divert: []item.Divert{{
			Clients: []netip.Prefix{netip.MustParsePrefix("10.9.1.0/24")},
			Servers: []netip.Prefix{netip.MustParsePrefix("10.9.2.0/24")},
			Ports:   ports,
		}},
	}
}

// dialFrom opens a connection from the client namespace.
func dialFrom(t *testing.T, ns netns.NsHandle, target string) net.Conn {
	t.Helper()
	var c net.Conn
	err := RunInNetns(ns, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", target, 5*time.Second)
		return err
	})
	if err != nil {
		t.Fatalf("dial %s from the client: %v", target, err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

func roundtrip(c net.Conn, r *bufio.Reader, msg string) (string, error) {
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return strings.TrimSpace(line), err
}

// Connections already diverted must survive a whitelist change that
// takes their port out (and one that takes every divert out): the table
// is replaced, and the transparent-socket rule must keep carrying them.
func TestWhitelistChangeKeepsDivertedConnectionsInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	_, client := divertTopology(t)
	applySpec(t, divertSpec(portrange.Single(5201), portrange.Range{Lo: 6000, Hi: 6010}))
	echoWithLocalAddr(t)

	c := dialFrom(t, client, "10.9.2.1:5201")
	defer c.Close()
	r := bufio.NewReader(c)
	got, err := roundtrip(c, r, "one")
	if err != nil || got != "10.9.2.1:5201 one" {
		t.Fatalf("before the change: %q, %v", got, err)
	}
	// Port 5201 leaves the whitelist.
	applySpec(t, divertSpec(portrange.Range{Lo: 6000, Hi: 6010}))
	got, err = roundtrip(c, r, "two")
	t.Logf("after 5201 left the whitelist: %q, %v", got, err)
	if err != nil || got != "10.9.2.1:5201 two" {
		t.Errorf("diverted connection broken by a whitelist change: %q, %v", got, err)
	}
	// No diverts at all.
	spec := divertSpec()
	spec.Divert = nil
	applySpec(t, spec)
	got, err = roundtrip(c, r, "three")
	t.Logf("after every divert left: %q, %v", got, err)
	if err != nil || got != "10.9.2.1:5201 three" {
		t.Errorf("diverted connection broken by removing all diverts: %q, %v", got, err)
	}
}

// While the whitelist keeps changing (a port range added and removed
// again and again), new connections to a port that stays in it must all
// be diverted: the table is swapped in one transaction.
func TestNoUndivertedWindowDuringWhitelistChangesInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	_, client := divertTopology(t)
	a := divertSpec(portrange.Single(5201))
	b := divertSpec(portrange.Single(5201), portrange.Range{Lo: 7000, Hi: 7100}, portrange.Single(22))
	applySpec(t, a)
	echoWithLocalAddr(t)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	changes := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		exs := Executors("/")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			spec := a
			if i%2 == 1 {
				spec = b
			}
			items, _ := spec.Items()
			for _, it := range items {
				if it.Kind == item.KindSteering && it.Key == item.SteeringKeyNftables {
					if err := exs[it.Kind].Apply(context.Background(), it); err != nil {
						t.Errorf("apply: %v", err)
						return
					}
				}
			}
			changes++
		}
	}()
	bad := 0
	const n = 300
	for i := range n {
		var c net.Conn
		err := RunInNetns(client, func() error {
			var err error
			c, err = net.DialTimeout("tcp4", "10.9.2.7:5201", 3*time.Second)
			return err
		})
		if err != nil {
			bad++
			t.Logf("connection %d: %v", i, err)
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := roundtrip(c, bufio.NewReader(c), "x")
		c.Close()
		if err != nil || got != "10.9.2.7:5201 x" {
			bad++
			t.Logf("connection %d: %q, %v", i, got, err)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d connections during %d whitelist swaps, %d not diverted", n, changes, bad)
	if bad > 0 {
		t.Errorf("%d of %d connections were not diverted while the whitelist changed", bad, n)
	}
}

// Whole ranges: clients 0.0.0.0/0 and ::/0, ports up to 65535. Their
// interval sets have no closing element; the table must read back as
// applied and divert a connection to the top port.
func TestWholeRangesReadBackAndDivertInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	_, client := divertTopology(t)
	spec := item.SteeringSpec{
		Interface:  "sosa0",
		ListenPort: 9876,
		Divert: []item.Divert{
			{Clients: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
				Servers: []netip.Prefix{netip.MustParsePrefix("10.9.2.0/24")},
				Ports:   []portrange.Range{{Lo: 1, Hi: 65535}}},
			{Clients: []netip.Prefix{netip.MustParsePrefix("::/0")},
				Servers: []netip.Prefix{netip.MustParsePrefix("2001:db8:2::/64")},
				Ports:   []portrange.Range{{Lo: 60000, Hi: 65535}}},
		},
	}
	applySpec(t, spec)
	t.Logf("table ip:\n%s", run(t, "nft", "list", "table", "ip", SteeringTable))
	echoWithLocalAddr(t)
	for _, target := range []string{"10.9.2.1:65535", "10.9.2.1:1"} {
		c := dialFrom(t, client, target)
		got, err := roundtrip(c, bufio.NewReader(c), "x")
		c.Close()
		if err != nil || got != target+" x" {
			t.Errorf("%s: %q, %v", target, got, err)
		}
	}
}

// TestLargeClientWhitelistInNetns: a whitelist of 2,000 disjoint client
// hosts (every other address of 10.64.0.0/20) is one interval set of
// 4,000 elements. Before, they went in one netlink attribute, whose
// 16-bit length the library wraps past 64 KiB unchecked: the kernel took
// a set of 385 prefixes whose last range never closed (10.64.2.210/31 up
// to 128.0.0.0/1), diverting every source above 10.64.2.210, and Apply
// failed at its read-back, every convergence. Now the elements go in
// messages of setElementsPerMessage, in the same transaction: the table
// reads back whole, and an address between two clients is not diverted.
// Found by review (helper-57).
func TestLargeClientWhitelistInNetns(t *testing.T) {
	if !testsupport.InFreshNetns(t, "nft", "ip") {
		return
	}
	run(t, "ip", "link", "set", "lo", "up")
	run(t, "ip", "link", "add", "sosa0", "type", "veth", "peer", "name", "sosa1")
	var clients []netip.Prefix
	a := netip.MustParseAddr("10.64.0.0")
	for range 2000 {
		clients = append(clients, netip.PrefixFrom(a, 32))
		a = a.Next().Next()
	}
	applySpec(t, divertSpec(portrange.Single(5201)))
	spec := divertSpec(portrange.Single(5201))
	spec.Divert[0].Clients = clients
	items, err := spec.Items()
	if err != nil {
		t.Fatal(err)
	}
	var table item.Item
	for _, it := range items {
		if it.Key == item.SteeringKeyNftables {
			table = it
		}
	}
	if err := NewSteering().Apply(context.Background(), table); err != nil {
		t.Fatalf("apply of 2000 client hosts: %.300s", err)
	}
	got := observeOne(t, NewSteering(), table)
	tp, err := item.ParseTproxyRules(got.Value)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the live table holds %d client prefixes", len(tp.Divert[0].Clients))
	if got.Value != table.Value {
		t.Errorf("the live table is not the one applied: %d client prefixes, the last ones %v", len(tp.Divert[0].Clients),
			tp.Divert[0].Clients[max(0, len(tp.Divert[0].Clients)-5):])
	}
	// Between two clients, and past the last: not in the set.
	set := run(t, "nft", "get", "element", "ip", SteeringTable, "clients0", "{ 10.64.15.158 }")
	t.Logf("the last client: %s", strings.TrimSpace(set))
	for _, outside := range []string{"10.64.15.159", "10.64.7.1", "192.0.2.1"} {
		if out, err := exec.Command("nft", "get", "element", "ip", SteeringTable, "clients0", "{ "+outside+" }").CombinedOutput(); err == nil {
			t.Errorf("%s, no client, is in the client set:\n%s", outside, out)
		}
	}
}
