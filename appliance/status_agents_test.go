package appliance

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/dataplane/relay"
)

// TestStatusAndMetricsShowAgentThroughput: a local agent's lifetime
// counters (sessions started, bytes each way) and its live sessions'
// throughput reach `status` (text and JSON) and /metrics, per agent, so
// the split of a site's load over its agents can be read from either.
func TestStatusAndMetricsShowAgentThroughput(t *testing.T) {
	a1 := localAgentStatus("east-1", true, "serving", relay.Stats{
		Totals:   relay.Totals{SessionsActive: 2, StreamsActive: 8, SessionsStarted: 33, BytesUp: 3 << 20, BytesDown: 1 << 30},
		Sessions: []relay.SessionStats{{ThroughputUp: 1e6, ThroughputDown: 199e6}, {ThroughputDown: 100e6}},
	})
	a2 := localAgentStatus("east-2", true, "serving", relay.Stats{Totals: relay.Totals{SessionsStarted: 31, BytesDown: 5 << 20}})
	if a1.SessionsStarted != 33 || a1.BytesUp != 3<<20 || a1.BytesDown != 1<<30 || a1.Throughput != 300e6 {
		t.Errorf("east-1: %+v", a1)
	}
	st := Status{Agents: []AgentStatus{a1, a2}}
	var b bytes.Buffer
	st.WriteText(&b)
	for _, want := range []string{"east-1", "33 started", "1.0 GiB relayed", "300.0 Mbit/s", "31 started", "5.0 MiB relayed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, b.String())
		}
	}
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	want := `"sessions_started":33,"bytes_up":3145728,"bytes_down":1073741824,"throughput_bps":300000000}`
	if !strings.Contains(string(js), want) {
		t.Errorf("status JSON lacks %s: %s", want, js)
	}

	m := newMetrics(func() liveStats { return liveStats{Local: []AgentStatus{a1, a2}} })
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			labels := ""
			for _, l := range mt.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			got[f.GetName()+"{"+labels+"}"] = mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
		}
	}
	for key, v := range map[string]float64{
		"sosappliance_agent_bytes_total{agent=east-1,direction=up,}":   3 << 20,
		"sosappliance_agent_bytes_total{agent=east-1,direction=down,}": 1 << 30,
		"sosappliance_agent_bytes_total{agent=east-2,direction=down,}": 5 << 20,
		"sosappliance_agent_sessions_started_total{agent=east-1,}":     33,
		"sosappliance_agent_sessions_started_total{agent=east-2,}":     31,
		"sosappliance_agent_throughput_bits_per_second{agent=east-1,}": 300e6,
		"sosappliance_agent_throughput_bits_per_second{agent=east-2,}": 0,
	} {
		if g, ok := got[key]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", key, g, ok, v)
		}
	}
}

// TestStatusShowsPerAgentKeys: a local agent that authenticates its
// streams with per-agent keys says so in status, text and JSON; one with
// the PSK alone says nothing of keys.
func TestStatusShowsPerAgentKeys(t *testing.T) {
	st := Status{Agents: []AgentStatus{
		localAgentStatus("east-1", true, "serving", relay.Stats{PerAgentKeys: true}),
		localAgentStatus("east-2", true, "serving", relay.Stats{}),
	}}
	var b bytes.Buffer
	st.WriteText(&b)
	if strings.Count(b.String(), "per-agent keys") != 1 {
		t.Errorf("status text, want per-agent keys for east-1 only:\n%s", b.String())
	}
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(js), `"per_agent_keys":true`) != 1 {
		t.Errorf("status JSON, want per_agent_keys for east-1 only: %s", js)
	}
}
