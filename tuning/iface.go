package tuning

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/sosappliance/sosappliance/host/item"
)

// Interface converges link settings through netlink in the network namespace
// of the calling thread. Keys are "IF/mtu" and "IF/txqueuelen"; values are
// decimal.
type Interface struct{}

// NewInterface returns the interface settings executor.
func NewInterface() *Interface { return &Interface{} }

// Kind implements Executor.
func (x *Interface) Kind() string { return item.KindInterface }

// minIPv4MTU is the smallest MTU an IPv4 interface may have (RFC 791).
const minIPv4MTU = 68

func readSetting(link netlink.Link, setting string) int {
	if setting == item.SettingMTU {
		return link.Attrs().MTU
	}
	return link.Attrs().TxQLen
}

// Observe reads each setting; a missing interface is reported not present.
func (x *Interface) Observe(ctx context.Context, items []item.Item) ([]item.Observation, error) {
	var errs []error
	obs := make([]item.Observation, 0, len(items))
	for _, it := range items {
		o := item.Observation{Item: item.Item{Kind: it.Kind, Key: it.Key}}
		ifname, setting, err := item.SplitInterfaceKey(it.Key)
		if err != nil {
			errs = append(errs, err)
			obs = append(obs, o)
			continue
		}
		link, err := netlink.LinkByName(ifname)
		var notFound netlink.LinkNotFoundError
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			errs = append(errs, fmt.Errorf("interface %s: %w", ifname, err))
		default:
			o.Present, o.Value = true, strconv.Itoa(readSetting(link, setting))
		}
		obs = append(obs, o)
	}
	return obs, errors.Join(errs...)
}

// Validate checks keys, values and that each interface exists.
func (x *Interface) Validate(ctx context.Context, items []item.Item) error {
	var errs []error
	// A missing interface is one error naming the settings the file
	// gives it, not one per setting alike.
	var missing []string
	wanted := map[string][]string{}
	notFoundErr := map[string]error{}
	for _, it := range items {
		ifname, setting, err := item.SplitInterfaceKey(it.Key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		v, err := item.CanonicalInterfaceValue(it.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("interface %s %s: %w", ifname, setting, err))
			continue
		}
		if n, _ := strconv.Atoi(v); setting == item.SettingMTU && n < minIPv4MTU {
			errs = append(errs, fmt.Errorf("interface %s: mtu %s is below the IPv4 minimum of %d", ifname, v, minIPv4MTU))
		}
		_, err = netlink.LinkByName(ifname)
		var notFound netlink.LinkNotFoundError
		switch {
		case errors.As(err, &notFound):
			if _, seen := wanted[ifname]; !seen {
				missing = append(missing, ifname)
				notFoundErr[ifname] = err
			}
			wanted[ifname] = append(wanted[ifname], setting)
		case err != nil:
			errs = append(errs, fmt.Errorf("interface %s: %w", ifname, err))
		}
	}
	for _, ifname := range missing {
		errs = append(errs, gone(ifname, fmt.Errorf("interface %s: %w (the file sets its %s)", ifname, notFoundErr[ifname], strings.Join(wanted[ifname], ", "))))
	}
	return errors.Join(errs...)
}

// Gone reports an interface that does not exist (GoneChecker).
func (x *Interface) Gone(ctx context.Context, it item.Item) error {
	ifname, _, err := item.SplitInterfaceKey(it.Key)
	if err != nil {
		return nil
	}
	var notFound netlink.LinkNotFoundError
	if _, err := netlink.LinkByName(ifname); errors.As(err, &notFound) {
		return gone(ifname, fmt.Errorf("interface %s: %w", ifname, err))
	}
	return nil
}

// Apply sets the value and reads it back.
func (x *Interface) Apply(ctx context.Context, it item.Item) error {
	ifname, setting, err := item.SplitInterfaceKey(it.Key)
	if err != nil {
		return err
	}
	v, err := item.CanonicalInterfaceValue(it.Value)
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(v)
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("interface %s: %w", ifname, err)
	}
	if setting == item.SettingMTU {
		err = netlink.LinkSetMTU(link, n)
	} else {
		err = netlink.LinkSetTxQLen(link, n)
	}
	if err != nil {
		return fmt.Errorf("interface %s: set %s %d: %w", ifname, setting, n, err)
	}
	if link, err = netlink.LinkByName(ifname); err != nil {
		return fmt.Errorf("interface %s: %w", ifname, err)
	}
	if got := readSetting(link, setting); got != n {
		return fmt.Errorf("interface %s: set %s %d but the kernel reports %d", ifname, setting, n, got)
	}
	return nil
}

// Remove is refused: interface settings always have a value.
func (x *Interface) Remove(ctx context.Context, it item.Item) error {
	return fmt.Errorf("interface %s cannot be removed, only set", it.Key)
}
