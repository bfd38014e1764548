package labnet

import (
	"reflect"
	"strings"
	"testing"
)

// ssPacketSockets is `ss -0 -a -m -p` in a lab's switch namespace
// (iproute2 6.1) after a slow 8-stripe transfer.
const ssPacketSockets = `Netid State  Recv-Q Send-Q Local Address:Port     Peer Address:PortProcess
p_raw UNCONN 0      0                  *:a-ctl                *     users:(("ovs-vswitchd",pid=18544,fd=37)) skmem:(r0,rb8388608,t0,tb8388608,f0,w0,o176,bl0,d0)
p_raw UNCONN 0      0                  *:a-agent              *     users:(("ovs-vswitchd",pid=18544,fd=40)) skmem:(r0,rb8388608,t0,tb8388608,f0,w0,o176,bl0,d7832)
p_raw UNCONN 0      0                  *:b-wan                *     users:(("ovs-vswitchd",pid=18544,fd=46)) skmem:(r0,rb8388608,t0,tb8388608,f0,w0,o176,bl0,d1974)
p_raw UNCONN 0      0                [0]:*                    *     users:(("ovs-vswitchd",pid=18544,fd=52)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d0)
p_raw UNCONN 0      0                  *:eth9                 *     users:(("tcpdump",pid=9,fd=3)) skmem:(r0,rb212992,t0,tb212992,f0,w0,o0,bl0,d5)
`

func TestParsePortSockets(t *testing.T) {
	got, err := parsePortSockets(ssPacketSockets)
	if err != nil {
		t.Fatal(err)
	}
	want := []PortSocket{
		{Port: "a-ctl", RecvBuffer: 8 << 20, SendBuffer: 8 << 20},
		{Port: "a-agent", RecvBuffer: 8 << 20, SendBuffer: 8 << 20, Drops: 7832},
		{Port: "b-wan", RecvBuffer: 8 << 20, SendBuffer: 8 << 20, Drops: 1974},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestParsePortSocketsRejectsWhatItCannotRead(t *testing.T) {
	for _, line := range []string{
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3))`,
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(r0,rb8388608,t0,tb8388608`,
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(r0,rb8388608,t0,tb8388608,f0)`,
		`p_raw UNCONN 0 0 *:a-wan * users:(("ovs-vswitchd",pid=1,fd=3)) skmem:(r0,rbx,t0,tb8388608,d0)`,
	} {
		if socks, err := parsePortSockets(line); err == nil {
			t.Errorf("parsePortSockets(%q) = %+v, want an error", line, socks)
		} else if !strings.Contains(err.Error(), "a-wan") {
			t.Errorf("error %q does not name the port", err)
		}
	}
}
