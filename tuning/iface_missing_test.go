package tuning

import (
	"context"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// A plan against an interface that is not there said "interface X: Link
// not found" once per setting the file gave it, twice alike for mtu and
// txqueuelen, naming neither. It is now one error that names them.
// Found by review (helper-88).
func TestMissingInterfaceOneErrorNamingItsSettings(t *testing.T) {
	err := NewInterface().Validate(context.Background(), []item.Item{
		{Kind: item.KindInterface, Key: "sosnope9/mtu", Value: "9000"},
		{Kind: item.KindInterface, Key: "sosnope9/txqueuelen", Value: "10000"},
	})
	if err == nil {
		t.Fatal("an interface that is not there was taken")
	}
	if msg := err.Error(); strings.Count(msg, "sosnope9") != 1 || !strings.Contains(msg, "(the file sets its mtu, txqueuelen)") {
		t.Errorf("want one error naming both settings, got:\n%s", msg)
	}
	if GoneObject(err) != "sosnope9" {
		t.Errorf("the error does not name the gone interface (forget-gone would not find it): %v", err)
	}
}
