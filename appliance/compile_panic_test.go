package appliance

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/sosappliance/sosappliance/appliance/config"
)

// TestCompilePanicIsAFailedLoad: a panic while the daemon reads its file
// (a bug in the loader: TestRunSurvivesAFileThatPanickedTheValidator
// mounted one, since fixed) ended the process, and every relay and the
// controller with it, on a reload. It is now a failed load, logged with
// its stack: the last good config keeps running.
func TestCompilePanicIsAFailedLoad(t *testing.T) {
	orig := loadConfigFile
	t.Cleanup(func() { loadConfigFile = orig })
	loadConfigFile = func(string) (*config.Config, config.Source, hcl.Diagnostics) { panic("a loader bug") }
	var logs bytes.Buffer
	d := &Daemon{log: slog.New(slog.NewTextHandler(&logs, nil)), opts: Options{ConfigPath: "/etc/sosappliance/sos.hcl"}}
	cfg, _, want, err := d.compile()
	if err == nil || cfg != nil || want != nil {
		t.Fatalf("compile after a panic: %v, %v, %v", cfg, want, err)
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "a loader bug") || !strings.Contains(err.Error(), "/etc/sosappliance/sos.hcl") {
		t.Errorf("the error does not name the file and the panic: %v", err)
	}
	if !strings.Contains(logs.String(), "compile_panic_test.go") {
		t.Errorf("the log has no stack:\n%s", logs.String())
	}
}
