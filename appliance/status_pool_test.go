package appliance

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sosappliance/sosappliance/dataplane/relay"
)

// TestStatusAndMetricsShowPools: a relay's pool counters reach `status`
// (text and JSON) and /metrics, per agent and far agent.
func TestStatusAndMetricsShowPools(t *testing.T) {
	pools := poolStatuses("agent-a", []relay.PoolStats{{
		Peer: netip.MustParseAddrPort("10.2.0.2:9877"), PeerName: "agent-b", Idle: 6, Target: 8, MinIdle: 4, Max: 16,
		Refills: 30, Claims: 24, Misses: 5, Died: 2, Expired: 1,
	}})
	st := Status{Pools: pools}
	var b bytes.Buffer
	st.WriteText(&b)
	for _, want := range []string{"pools:", "agent-b (10.2.0.2:9877)", "8 (4-16)", "24", "30"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, b.String())
		}
	}
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	want := `"pools":[{"agent":"agent-a","peer":"agent-b","address":"10.2.0.2:9877","idle":6,"target":8,"min_idle":4,"max":16,"claims":24,"misses":5,"refills":30,"died":2,"expired":1}]`
	if !strings.Contains(string(js), want) {
		t.Errorf("status JSON lacks %s: %s", want, js)
	}

	// A pool whose far agent refuses pooled streams says so.
	refused := Status{Pools: poolStatuses("agent-a", []relay.PoolStats{{
		Peer: netip.MustParseAddrPort("10.2.0.2:9877"), PeerName: "agent-b", MinIdle: 4, Max: 16, Target: 4,
		Failures: 3, RetryAt: time.Now().Add(4 * time.Second), Refused: "pooled stream refused",
	}})}
	b.Reset()
	refused.WriteText(&b)
	if !strings.Contains(b.String(), "refused by agent-b (pooled stream refused); 3 attempts, next in 4 s") {
		t.Errorf("status text of a refused pool:\n%s", b.String())
	}
	if js, _ := json.Marshal(refused); !strings.Contains(string(js), `"refused":"pooled stream refused","failures":3,"retry_in_seconds":`) {
		t.Errorf("status JSON of a refused pool: %s", js)
	}

	// A pool whose idle streams die young says so.
	young := Status{Pools: poolStatuses("agent-a", []relay.PoolStats{{
		Peer: netip.MustParseAddrPort("10.2.0.2:9877"), PeerName: "agent-b", MinIdle: 4, Max: 16, Target: 4,
		DiedYoung: 2, RetryAt: time.Now().Add(3 * time.Second),
	}})}
	b.Reset()
	young.WriteText(&b)
	if !strings.Contains(b.String(), "pool of agent-a toward agent-b: idle streams died within a second of opening, 2 times in a row") ||
		!strings.Contains(b.String(), "next in 3 s") {
		t.Errorf("status text of a pool whose streams die young:\n%s", b.String())
	}
	if js, _ := json.Marshal(young); !strings.Contains(string(js), `"died_young":2,"retry_in_seconds":`) {
		t.Errorf("status JSON of a pool whose streams die young: %s", js)
	}

	m := newMetrics(func() liveStats { return liveStats{Pools: pools} })
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			v := mt.GetGauge().GetValue() + mt.GetCounter().GetValue()
			labels := ""
			for _, l := range mt.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			got[f.GetName()+"{"+labels+"}"] = v
		}
	}
	for name, v := range map[string]float64{
		"sosappliance_pool_idle_streams": 6, "sosappliance_pool_claims_total": 24, "sosappliance_pool_misses_total": 5,
		"sosappliance_pool_refills_total": 30, "sosappliance_pool_died_total": 2,
	} {
		key := name + "{agent=agent-a,peer=agent-b,}"
		if got[key] != v {
			t.Errorf("%s = %v, want %v", key, got[key], v)
		}
	}
}
