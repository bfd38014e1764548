package labnet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
)

// KillStreams destroys up to n of agent-a's established stripe streams to
// agent-b's data port, chosen at random, with `ss -K` in agent-a's
// namespace: to both agents it looks like the network reset them. It
// returns how many it killed. The sessions must survive it (their frames
// go on the other streams and agent-a opens replacements).
func (l *Lab) KillStreams(ctx context.Context, n int) (int, error) {
	b := l.cfg.Agent(string(AgentB))
	if b == nil {
		return 0, fmt.Errorf("the lab's config has no agent %q", AgentB)
	}
	data := b.DataAddr()
	out, err := l.Run(ctx, AgentA, "ss", "-Htn", "state", "established", "dst", data.Addr().String(),
		"dport", "=", fmt.Sprintf(":%d", data.Port()))
	if err != nil {
		return 0, err
	}
	var locals []netip.AddrPort
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		// With a state filter, ss leaves the state column out.
		if ap, err := netip.ParseAddrPort(f[2]); err == nil {
			locals = append(locals, ap)
		}
	}
	rand.Shuffle(len(locals), func(i, j int) { locals[i], locals[j] = locals[j], locals[i] })
	killed := 0
	for _, local := range locals[:min(n, len(locals))] {
		if _, err := l.Run(ctx, AgentA, "ss", "-K", "-Htn", "state", "established",
			"dst", data.Addr().String(), "dport", "=", fmt.Sprintf(":%d", data.Port()),
			"sport", "=", fmt.Sprintf(":%d", local.Port())); err != nil {
			return killed, err
		}
		killed++
	}
	return killed, nil
}

// LostStreams reads a node's lost-stream counters from its status.
func (l *Lab) LostStreams(ctx context.Context, node string) (LostStreams, error) {
	js, err := l.Status(ctx, node)
	if err != nil {
		return LostStreams{}, err
	}
	var st struct {
		LostStreams LostStreams `json:"lost_streams"`
	}
	if err := json.Unmarshal(js, &st); err != nil {
		return LostStreams{}, fmt.Errorf("status of %s: %w", node, err)
	}
	return st.LostStreams, nil
}

// LostStreams are the counters of `sosappliance status` about lost
// stripe streams.
type LostStreams struct {
	Lost              uint64 `json:"lost"`
	Replaced          uint64 `json:"replaced"`
	ReinjectedFrames  uint64 `json:"reinjected_frames"`
	ReinjectedBytes   uint64 `json:"reinjected_bytes"`
	DuplicatesDropped uint64 `json:"duplicates_dropped"`
}

func (s LostStreams) String() string {
	return fmt.Sprintf("%d streams lost, %d replaced, %d bytes reinjected, %d duplicates dropped",
		s.Lost, s.Replaced, s.ReinjectedBytes, s.DuplicatesDropped)
}
