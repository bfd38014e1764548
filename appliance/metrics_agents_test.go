package appliance

import (
	"strings"
	"testing"
)

// The controller's view of each agent reaches /metrics: up, sessions and
// its bucket share of each spread whitelist.
func TestMetricsPerAgent(t *testing.T) {
	m := newMetrics(func() liveStats {
		return liveStats{Agents: []agentStat{
			{Name: "a1", Up: true, Sessions: 4, Shares: []agentShare{{Whitelist: "bulk", Side: "client", Buckets: 16, Of: 16}}},
			{Name: "a2", Up: false, Shares: []agentShare{{Whitelist: "bulk", Side: "client", Buckets: 0, Of: 16}}},
		}}
	})
	body := scrapeMetrics(t, m)
	for _, want := range []string{
		`sosappliance_agent_up{agent="a1"} 1`,
		`sosappliance_agent_up{agent="a2"} 0`,
		`sosappliance_agent_sessions{agent="a1"} 4`,
		`sosappliance_agent_share_ratio{agent="a1",side="client",whitelist="bulk"} 1`,
		`sosappliance_agent_share_ratio{agent="a2",side="client",whitelist="bulk"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %s in\n%s", want, body)
		}
	}
}
