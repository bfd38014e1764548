package tuning

import (
	"testing"

	"github.com/sosappliance/sosappliance/host/item"
)

func TestExecutorsCoverEveryKind(t *testing.T) {
	exs := Executors(t.TempDir())
	for _, kind := range []string{item.KindSysctl, item.KindIRQ, item.KindInterface, item.KindRelay, item.KindSteering} {
		ex, ok := exs[kind]
		if !ok {
			t.Errorf("no executor for %s", kind)
			continue
		}
		if ex.Kind() != kind {
			t.Errorf("executor for %s says it is %s", kind, ex.Kind())
		}
		if _, ok := ex.(Validator); !ok {
			t.Errorf("executor %s does not validate", kind)
		}
	}
}
