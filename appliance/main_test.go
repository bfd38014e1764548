package appliance

import (
	"testing"

	"github.com/sosappliance/sosappliance/internal/testsupport"
)

// TestMain lets the test binary stand in for the processes the tests kill.
func TestMain(m *testing.M) {
	testsupport.Main(m, testsupport.Children{
		daemonChildRole: runDaemonChild,
		crashChildRole:  runCrashChild,
	})
}
