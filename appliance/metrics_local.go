package appliance

import "github.com/prometheus/client_golang/prometheus"

// The load of each agent this node runs, from its own relay: with several
// agents per site, how a site's connections and bytes split over them.
var (
	descAgentBytes  = prometheus.NewDesc("sosappliance_agent_bytes_total", "Payload a local agent relayed over its lifetime, by direction (up: client to server).", []string{"agent", "direction"}, nil)
	descAgentStart  = prometheus.NewDesc("sosappliance_agent_sessions_started_total", "Sessions a local agent started over its lifetime.", []string{"agent"}, nil)
	descAgentRate   = prometheus.NewDesc("sosappliance_agent_throughput_bits_per_second", "Sum of a local agent's live sessions' recent throughput, both directions.", []string{"agent"}, nil)
	localAgentDescs = []*prometheus.Desc{descAgentBytes, descAgentStart, descAgentRate}
)

func collectLocalAgents(ch chan<- prometheus.Metric, local []AgentStatus) {
	for _, a := range local {
		ch <- prometheus.MustNewConstMetric(descAgentBytes, prometheus.CounterValue, float64(a.BytesUp), a.Name, "up")
		ch <- prometheus.MustNewConstMetric(descAgentBytes, prometheus.CounterValue, float64(a.BytesDown), a.Name, "down")
		ch <- prometheus.MustNewConstMetric(descAgentStart, prometheus.CounterValue, float64(a.SessionsStarted), a.Name)
		ch <- prometheus.MustNewConstMetric(descAgentRate, prometheus.GaugeValue, a.Throughput, a.Name)
	}
}
