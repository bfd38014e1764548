package tuning

import "github.com/sosappliance/sosappliance/host/item"

// Executors returns every executor of this package by kind, for the host
// tree at root ("/" in production). Netlink executors act in the network
// namespace of the calling thread.
func Executors(root string) map[string]Executor {
	return map[string]Executor{
		item.KindSysctl:    NewSysctl(root),
		item.KindIRQ:       NewIRQ(root),
		item.KindInterface: NewInterface(),
		item.KindRelay:     NewRelay(root),
		item.KindSteering:  NewSteering(),
	}
}
