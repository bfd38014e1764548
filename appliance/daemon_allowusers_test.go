package appliance

import (
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// otherUserGets says whether another local user (testsupport.OtherUID)
// gets an answer from http://addr+path with its connection bound to from.
func otherUserGets(t *testing.T, from, addr, path string) bool {
	t.Helper()
	out, err := testsupport.AsOtherUser(t, "curl", "-sS", "-m", "10", "--interface", from, "-o", "/dev/null", "-w", "%{http_code}", "http://"+addr+path).CombinedOutput()
	return err == nil && strings.TrimSpace(string(out)) == "200"
}

// allowListedConfig is n's config with metrics_allow and health_allow
// (on agent a1) set to allow, and metrics_allow_users and
// health_allow_users when not empty.
func allowListedConfig(n *reloadNode, allow, healthUsers, metricsUsers string) string {
	c := n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877})
	daemon := "daemon {\n  shutdown_timeout = \"2s\"\n  metrics_allow = " + allow + "\n"
	if metricsUsers != "" {
		daemon += "  metrics_allow_users = " + metricsUsers + "\n"
	}
	c = strings.Replace(c, `daemon { shutdown_timeout = "2s" }`, daemon+"}", 1)
	agent := `    tuning      = ["t"]` + "\n    health_allow = " + allow
	if healthUsers != "" {
		agent += "\n    health_allow_users = " + healthUsers
	}
	return strings.Replace(c, `    tuning      = ["t"]`, agent, 1)
}

// runAllowListed runs n's daemon on config (its controller and agent a1
// on 10.1.0.2) until the controller sees a1 up, and returns it with its
// metrics and a1's health addresses.
func runAllowListed(t *testing.T, n *reloadNode, config string) (d *Daemon, metrics, health string) {
	t.Helper()
	writeFile(t, n.cfgPath, config)
	metrics, health = "10.1.0.2:9465", "10.1.0.2:9878"
	d = n.daemonWith(metrics)
	runDaemon(t, d, n.logs)
	testsupport.Eventually(t, 15*time.Second, "the controller sees a1 up", func() bool { return controllerSeesUp(d, "a1") })
	return d, metrics, health
}

// TestHealthAndMetricsRefuseOtherLocalUsers: with health_allow and
// metrics_allow admitting the node's own address, any local user could
// bind that address and read /sessions (the clients and servers of the
// live sessions) and /metrics (found by review, helper-90). A node with
// its controller and agent a1 on 10.1.0.2: another local user connecting
// from 10.1.0.2 is closed unread on both ports, while the controller's own
// checks (root) keep a1 up. A reload naming the user in
// health_allow_users and metrics_allow_users lets it in; one naming a user
// the node lacks is taken, with a warning.
func TestHealthAndMetricsRefuseOtherLocalUsers(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft", "curl", "setpriv") {
		return
	}
	n := newReloadNode(t)
	const self = "10.1.0.2"
	config := func(healthUsers, metricsUsers string) string {
		return allowListedConfig(n, `["10.1.0.2"]`, healthUsers, metricsUsers)
	}
	d, metrics, health := runAllowListed(t, n, config("", ""))
	a1Up := func() bool { return controllerSeesUp(d, "a1") }

	if otherUserGets(t, self, health, "/sessions") {
		t.Errorf("another local user from %s read /sessions", self)
	}
	if otherUserGets(t, self, metrics, "/metrics") {
		t.Errorf("another local user from %s read /metrics", self)
	}
	scrape, err := testsupport.GetFrom(self, metrics, "/metrics")
	if err != nil {
		t.Fatalf("root's scrape from %s: %v", self, err)
	}
	for _, want := range []string{
		`sosappliance_metrics_connections_closed_total{reason="denied"} 1`,
		`sosappliance_agent_health_connections_closed_total{agent="a1",reason="denied"} 1`,
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}

	writeFile(t, n.cfgPath, config(`["65534"]`, `["nobody", "no-such-user-here"]`))
	testsupport.Eventually(t, 15*time.Second, "the reload naming the user", func() bool {
		return otherUserGets(t, self, health, "/sessions") && otherUserGets(t, self, metrics, "/metrics")
	})
	if !strings.Contains(n.logs.String(), "metrics_allow_users names users this node does not have") ||
		!strings.Contains(n.logs.String(), "no-such-user-here") {
		t.Errorf("no warning names the user the node lacks:\n%s", n.logs.String())
	}
	if !a1Up() {
		t.Error("a1 is down")
	}
}
