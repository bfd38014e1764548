package relay

import (
	"strings"
	"testing"
)

// TestResponderLogNamesWrongAddress: with per-agent keys, agent-a's
// route names agent-x at agent-b's address (addresses swapped, an agent
// moved). The hello is MAC'd with the pair key agent-a -> agent-x, which
// agent-b cannot check; agent-b's log names the agent the hello was meant
// for (read unchecked), as agent-a's report of the closed handshake gives
// this cause (TestWrongResponderDiagnosed). (Found by review: it said
// only "another key ... or another PSK", which sent the operator to
// rotate keys that were right.)
func TestResponderLogNamesWrongAddress(t *testing.T) {
	a, b, x := newAgentKey(t), newAgentKey(t), newAgentKey(t)
	_, addr, logs := keyedResponder(t, true, a, b)
	ag, rc := keyedInitiator(t, true, a, map[string][]byte{"agent-b": pub(b), "agent-x": pub(x)}, "agent-x", addr)
	if err := initiateOnce(t, ag, rc, addr, "agent-x"); err == nil {
		t.Fatal("agent-b accepted a hello for agent-x")
	}
	line := badHelloLine(t, logs)
	if !strings.Contains(line, "address") && !strings.Contains(line, "another agent") && !strings.Contains(line, "responder") {
		t.Errorf("agent-b's log for a hello agent-a meant for agent-x (keyed for that pair) names no wrong address or responder among the causes: %s", line)
	}
}
