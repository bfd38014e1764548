// Package appliance is the reconciler of sosappliance: it plans and applies a
// node's desired state through the executors, records it in the store, and
// runs as the daemon that keeps the node converged and reloads on edit.
package appliance
