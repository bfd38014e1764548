package appliance

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/dataplane/relay"
)

// TestStatusShowsLostStreams: the lost-stream counters of the relays
// reach `status` in text and JSON, per session and in total.
func TestStatusShowsLostStreams(t *testing.T) {
	var st Status
	st.LostStreams.add(relay.Totals{StreamsLost: 7, StreamsReplaced: 6, ReinjectedFrames: 40, ReinjectedBytes: 2400000, DuplicatesDropped: 3})
	st.LostStreams.add(relay.Totals{StreamsLost: 1, HeadOfLineFrames: 5, HeadOfLineBytes: 300000})
	st.Sessions = []SessionStatus{{Agent: "agent-a", Whitelist: "w", Streams: 64, StreamsLive: 63, StreamsLost: 8, StreamsReplaced: 7, ReinjectedBytes: 2400000}}
	var b bytes.Buffer
	st.WriteText(&b)
	for _, want := range []string{"lost streams: 8 lost, 6 replaced, 2400000 bytes reinjected (40 frames), 3 duplicates dropped", "63/64", "8/7"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status text lacks %q:\n%s", want, b.String())
		}
	}
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"lost_streams":{"lost":8,"replaced":6,"reinjected_frames":40,"reinjected_bytes":2400000,"duplicates_dropped":3,"head_of_line_frames":5,"head_of_line_bytes":300000}`, `"streams_live":63`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("status JSON lacks %s: %s", want, js)
		}
	}
}
