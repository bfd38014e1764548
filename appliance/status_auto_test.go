package appliance

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestStatusShowsAutoStreams: the stream count a streams = "auto" session
// chose reaches `status` (text and JSON) and /metrics, where the live
// sessions of a whitelist give their fewest and most streams.
func TestStatusShowsAutoStreams(t *testing.T) {
	st := Status{Sessions: []SessionStatus{
		{Agent: "agent-a", Whitelist: "auto", Streams: 64, StreamsLive: 15, StreamsChosen: 16, AutoStreams: true, AutoState: "held back by an end host"},
		{Agent: "agent-a", Whitelist: "fixed", Streams: 8, StreamsLive: 8, StreamsChosen: 8},
	}}
	var b bytes.Buffer
	st.WriteText(&b)
	for _, want := range []string{"15/16 (auto, max 64; held back by an end host)", " 8/8 "} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, b.String())
		}
	}
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"streams":64,`, `"streams_chosen":16,"auto_streams":true,"auto_state":"held back by an end host"`, `"streams_chosen":8}`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("status JSON lacks %s: %s", want, js)
		}
	}

	var auto autoStreamStats
	for _, chosen := range []int{8, 32, 16} {
		auto = auto.add("agent-a", "auto", chosen)
	}
	auto = auto.add("agent-b", "auto", 4)
	m := newMetrics(func() liveStats { return liveStats{AutoStreams: auto} })
	body := scrapeMetrics(t, m)
	for _, want := range []string{
		`sosappliance_auto_streams{agent="agent-a",stat="min",whitelist="auto"} 8`,
		`sosappliance_auto_streams{agent="agent-a",stat="max",whitelist="auto"} 32`,
		`sosappliance_auto_streams{agent="agent-b",stat="max",whitelist="auto"} 4`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %s in\n%s", want, body)
		}
	}
}
