package tuning

import (
	"context"
	"strings"
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

// TestRelayKindIsObsolete: relay pinning travels in the relay spec; the
// relay executor owns nothing, so an old record of it is forgotten.
func TestRelayKindIsObsolete(t *testing.T) {
	ctx := context.Background()
	ex := NewRelay(t.TempDir())
	it := item.Item{Kind: item.KindRelay, Key: item.RelayKeyCPUs, Value: "3"}
	if o := observeOne(t, ex, it); o.Present {
		t.Fatalf("observed %+v", o)
	}
	if err := ex.Validate(ctx, []item.Item{it}); err == nil || !strings.Contains(err.Error(), "from its spec") {
		t.Fatalf("Validate = %v", err)
	}
	if err := ex.Apply(ctx, it); err == nil {
		t.Fatal("Apply succeeded")
	}
	if err := ex.Remove(ctx, it); err != nil {
		t.Fatalf("Remove: %v", err)
	}
}
