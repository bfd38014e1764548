package desired

import (
	"fmt"

	"github.com/sosappliance/sosappliance/host/item"
)

// steeringItems is the agent's TPROXY host state: divert new connections of
// its client-side whitelists to the transparent listener, mark packets of its
// transparent sockets, send on the steered packets of its whitelists (either
// side) that are neither, route marked packets locally, and loosen rp_filter
// on the agent interface.
func steeringItems(a *Agent) ([]item.Item, error) {
	spec := item.SteeringSpec{Interface: a.Interface, ListenPort: a.Relay.TransparentListen.Port(),
		Mark: a.SteeringMark, RouteTable: a.SteeringTable, RulePriority: a.SteeringPriority}
	for _, r := range a.Relay.Client {
		spec.Divert = append(spec.Divert, item.Divert{Clients: r.Clients, Servers: r.Servers, Ports: r.Ports, Server: r.Server, Port: r.Port})
	}
	for _, r := range a.Relay.Server {
		spec.Replies = append(spec.Replies, item.Divert{Clients: r.Clients, Servers: r.Servers, Ports: r.Ports, Server: r.Server, Port: r.Port})
	}
	items, err := spec.Items()
	if err != nil {
		return nil, fmt.Errorf("agent %s steering: %w", a.Name, err)
	}
	return items, nil
}
