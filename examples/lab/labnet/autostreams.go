package labnet

import (
	"context"
	"encoding/json"
	"fmt"
)

// AutoStreamsChosen reads from a node's status the stream count the live
// sessions of a streams = "auto" whitelist chose: the most among them, 0
// when none is live.
func (l *Lab) AutoStreamsChosen(ctx context.Context, node, whitelist string) (int, error) {
	js, err := l.Status(ctx, node)
	if err != nil {
		return 0, err
	}
	var st struct {
		Sessions []struct {
			Whitelist     string `json:"whitelist"`
			StreamsChosen int    `json:"streams_chosen"`
			AutoStreams   bool   `json:"auto_streams"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal(js, &st); err != nil {
		return 0, fmt.Errorf("status of %s: %w", node, err)
	}
	chosen := 0
	for _, s := range st.Sessions {
		if s.AutoStreams && s.Whitelist == whitelist {
			chosen = max(chosen, s.StreamsChosen)
		}
	}
	return chosen, nil
}
