package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/sosappliance/sosappliance/appliance"
)

// reportSwitches prints what converging the switches did.
func reportSwitches(w io.Writer, outcomes []appliance.SwitchOutcome, err error) error {
	if errors.Is(err, appliance.ErrDaemonConverges) {
		fmt.Fprintf(w, "\nSwitch flows: %v.\n", err)
		return nil
	}
	for _, o := range outcomes {
		switch {
		case o.Skipped != "":
			fmt.Fprintf(w, "\nSwitch %s: skipped: %s.\n", o.Switch, o.Skipped)
		case o.Err != nil:
			fmt.Fprintf(w, "Switch %s: %d flow mod(s) sent, then: %v\n", o.Switch, o.Sent, o.Err)
		default:
			fmt.Fprintf(w, "Switch %s: %d flow mod(s) sent.\n", o.Switch, o.Sent)
		}
	}
	return err
}
