package appliance

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// controllerSeesUp says whether d's controller sees agent up.
func controllerSeesUp(d *Daemon, agent string) bool {
	for _, a := range d.Status().Agents {
		if a.Name == agent && !a.Local && a.Healthy {
			return true
		}
	}
	return false
}

// TestHealthAndMetricsAllow runs a node with its controller, agent a1 and
// metrics on 10.1.0.2, with health_allow and metrics_allow admitting only
// that address. Another host on the LAN (10.1.0.9) asking the health port
// for /sessions or the metrics port for /metrics is closed unread, and
// both counts show in the metrics and in status, while the controller's
// own checks keep a1 up. A reload admitting 10.1.0.9 lets it in; one that
// would shut out the controller on the node is refused with the address
// named, and everything keeps running.
func TestHealthAndMetricsAllow(t *testing.T) {
	if !testsupport.InFreshNetns(t, "ip", "nft") {
		return
	}
	n := newReloadNode(t)
	cmdOut(t, "ip", "addr", "add", "10.1.0.9/24", "dev", "eth1")
	const self, other = "10.1.0.2", "10.1.0.9"
	config := func(healthAllow, metricsAllow string) string {
		c := n.config(reloadEdit{rmemMax: "100000", controllerPort: 6653, dataPort: 9877})
		c = strings.Replace(c, `daemon { shutdown_timeout = "2s" }`,
			"daemon {\n  shutdown_timeout = \"2s\"\n  metrics_allow = "+metricsAllow+"\n}", 1)
		return strings.Replace(c, `    tuning      = ["t"]`, `    tuning      = ["t"]`+"\n    health_allow = "+healthAllow, 1)
	}
	writeFile(t, n.cfgPath, config(`["10.1.0.2"]`, `["10.1.0.2"]`))
	metricsAddr := self + ":9465"
	d := n.daemonWith(metricsAddr)
	runDaemon(t, d, n.logs)
	a1Up := func() bool { return controllerSeesUp(d, "a1") }
	testsupport.Eventually(t, 15*time.Second, "the controller sees a1 up through health_allow", a1Up)

	health, metrics := self+":9878", metricsAddr
	if n, err := testsupport.Unanswered(other, health, "/sessions"); n != 0 || err == nil {
		t.Errorf("a LAN host outside health_allow read %d bytes of /sessions (%v)", n, err)
	}
	if n, err := testsupport.Unanswered(other, metrics, "/metrics"); n != 0 || err == nil {
		t.Errorf("a LAN host outside metrics_allow read %d bytes of /metrics (%v)", n, err)
	}
	scrape, err := testsupport.GetFrom(self, metrics, "/metrics")
	if err != nil {
		t.Fatalf("a scrape from the allowed source: %v", err)
	}
	for _, want := range []string{
		`sosappliance_metrics_connections_closed_total{reason="denied"} 1`,
		`sosappliance_agent_health_connections_closed_total{agent="a1",reason="denied"} 1`,
		`sosappliance_agent_health_connections_closed_total{agent="a1",reason="evicted"} 0`,
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	var local string
	for _, a := range d.Status().Agents {
		if a.Name == "a1" && a.Local {
			local = a.Detail
		}
	}
	if !strings.Contains(local, "health port closed 1 denied") {
		t.Errorf("status of local a1 = %q, want the denied connection counted", local)
	}
	js, _ := json.Marshal(d.Status())
	if !strings.Contains(string(js), `"health_closed":{"denied":1,"evicted":0,"refused":0}`) {
		t.Errorf("status JSON lacks the health port's closed counts: %s", js)
	}

	writeFile(t, n.cfgPath, config(`["10.1.0.2", "10.1.0.9"]`, `["10.1.0.2", "10.1.0.9"]`))
	testsupport.Eventually(t, 15*time.Second, "the reload admitting 10.1.0.9", func() bool {
		_, herr := testsupport.GetFrom(other, health, "/healthz")
		_, merr := testsupport.GetFrom(other, metrics, "/metrics")
		return herr == nil && merr == nil
	})

	fails := d.Status().ReloadFails
	writeFile(t, n.cfgPath, config(`["10.1.0.9"]`, `["10.1.0.9"]`))
	testsupport.Eventually(t, 15*time.Second, "a refused reload naming the controller's address", func() bool {
		st := d.Status()
		return st.ReloadFails > fails && st.LastReload != nil && len(st.LastReload.Problems) == 1 &&
			strings.Contains(st.LastReload.Problems[0], `sos.hcl:23:20: Agent "a1" health_allow does not admit 10.1.0.2`)
	})
	var text bytes.Buffer
	st := d.Status()
	st.WriteText(&text)
	if !strings.Contains(text.String(), `health_allow does not admit 10.1.0.2, where the controller on its node "host1" probes it from`) {
		t.Errorf("status text does not show the refused reload's problem:\n%s", text.String())
	}
	if _, err := testsupport.GetFrom(self, health, "/healthz"); err != nil {
		t.Errorf("the controller's source after the refused reload: %v", err)
	}
	if !a1Up() {
		t.Error("a1 is down after the refused reload")
	}
}
