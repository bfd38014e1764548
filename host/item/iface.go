package item

import (
	"fmt"
	"strconv"
	"strings"
)

// Interface setting names.
const (
	SettingMTU        = "mtu"
	SettingTxQueueLen = "txqueuelen"
)

// InterfaceKey is the item key of one setting of an interface.
func InterfaceKey(ifname, setting string) string { return ifname + "/" + setting }

// SplitInterfaceKey reads an interface key into the interface name and the
// setting, refusing settings that are not SettingMTU or SettingTxQueueLen.
func SplitInterfaceKey(key string) (ifname, setting string, err error) {
	ifname, setting, ok := strings.Cut(key, "/")
	if !ok || ifname == "" || (setting != SettingMTU && setting != SettingTxQueueLen) {
		return "", "", fmt.Errorf("interface key %q: want IF/%s or IF/%s", key, SettingMTU, SettingTxQueueLen)
	}
	return ifname, setting, nil
}

// CanonicalInterfaceValue rewrites a setting as plain decimal.
func CanonicalInterfaceValue(v string) (string, error) {
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 31)
	if err != nil {
		return "", fmt.Errorf("interface setting %q is not a decimal number", v)
	}
	return strconv.FormatUint(n, 10), nil
}
