package appliance

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sosappliance/sosappliance/dataplane/relay"
)

// The load of each agent this node runs, from its own relay: with several
// agents per site, how a site's connections and bytes split over them.
var (
	descAgentBytes  = prometheus.NewDesc("sosappliance_agent_bytes_total", "Payload a local agent relayed over its lifetime, by direction (up: client to server).", []string{"agent", "direction"}, nil)
	descAgentStart  = prometheus.NewDesc("sosappliance_agent_sessions_started_total", "Sessions a local agent started over its lifetime.", []string{"agent"}, nil)
	descAgentRate   = prometheus.NewDesc("sosappliance_agent_throughput_bits_per_second", "Sum of a local agent's live sessions' recent throughput, both directions.", []string{"agent"}, nil)
	descAgentHealth = prometheus.NewDesc("sosappliance_agent_health_connections_closed_total", "Connections a local agent's health port closed unserved, by reason: denied (outside its health_allow), evicted (past its connection caps), refused (new, while every other was being served).", []string{"agent", "reason"}, nil)
	localAgentDescs = []*prometheus.Desc{descAgentBytes, descAgentStart, descAgentRate, descAgentHealth}
)

func collectLocalAgents(ch chan<- prometheus.Metric, local []AgentStatus) {
	for _, a := range local {
		ch <- prometheus.MustNewConstMetric(descAgentBytes, prometheus.CounterValue, float64(a.BytesUp), a.Name, "up")
		ch <- prometheus.MustNewConstMetric(descAgentBytes, prometheus.CounterValue, float64(a.BytesDown), a.Name, "down")
		ch <- prometheus.MustNewConstMetric(descAgentStart, prometheus.CounterValue, float64(a.SessionsStarted), a.Name)
		ch <- prometheus.MustNewConstMetric(descAgentRate, prometheus.GaugeValue, a.Throughput, a.Name)
		collectClosed(ch, descAgentHealth, a.HealthClosed, a.Name)
	}
}

// collectClosed reports what an HTTP server closed unserved, one series
// per reason; d's labels are labels and then the reason.
func collectClosed(ch chan<- prometheus.Metric, d *prometheus.Desc, c relay.HTTPClosed, labels ...string) {
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"denied", c.Denied}, {"evicted", c.Evicted}, {"refused", c.Refused}} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(r.n), append(labels, r.reason)...)
	}
}
