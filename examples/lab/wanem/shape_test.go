package wanem

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	cases := []struct {
		in      string
		want    int64
		wantErr string
	}{
		{"500mbit", 500_000_000, ""},
		{"1gbit", 1_000_000_000, ""},
		{"1.5Gbit", 1_500_000_000, ""},
		{"64kbit", 64_000, ""},
		{"9600bit", 9600, ""},
		{"2tbit", 2_000_000_000_000, ""},
		{"1000000", 1_000_000, ""},
		{" 10 mbit ", 10_000_000, ""},
		{"0", 0, ""},
		{"fast", 0, "not a number"},
		{"mbit", 0, "not a number"},
		{"-1mbit", 0, "negative"},
		{"10mbps", 0, "not a number"},
		{"NaN", 0, "not a number"},
		{"1e30tbit", 0, "too large"},
	}
	for _, tc := range cases {
		got, err := ParseRate(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRate(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	cases := []struct {
		in      string
		want    int
		wantErr string
	}{
		{"2MB", 2_000_000, ""},
		{"2MiB", 2 << 20, ""},
		{"512KiB", 512 << 10, ""},
		{"512kb", 512_000, ""},
		{"1GiB", 1 << 30, ""},
		{"9000B", 9000, ""},
		{"9000", 9000, ""},
		{"1.5MB", 1_500_000, ""},
		{"4GiB", 0, "larger than"},
		{"lots", 0, "not a number"},
		{"-5KB", 0, "negative"},
	}
	for _, tc := range cases {
		got, err := ParseSize(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSize(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestConfigValidateReportsEveryField(t *testing.T) {
	bad := Shape{Delay: -1, Rate: -1, QueueBytes: -1, Loss: 1.5}
	err := Config{AtoB: bad, BtoA: Shape{Loss: -0.1}}.Validate()
	if err == nil {
		t.Fatal("Validate accepted negative and out-of-range fields")
	}
	for _, want := range []string{
		"a->b: delay", "rate", "queue", "loss 1.5", "b->a: loss -0.1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if err := Symmetric(Shape{Delay: 100 * time.Millisecond, Rate: 500e6, Loss: 0.001, Seed: 1}).Validate(); err != nil {
		t.Errorf("the lab's WAN shape is rejected: %v", err)
	}
}

func TestEffectiveQueueBytes(t *testing.T) {
	cases := []struct {
		name  string
		shape Shape
		want  int
	}{
		{"explicit", Shape{QueueBytes: 2_000_000, Rate: 500e6, Delay: 100 * time.Millisecond}, 2_000_000},
		// 500 Mbit/s × 200 ms round trip = 12.5 MB.
		{"lab bdp", Shape{Rate: 500e6, Delay: 100 * time.Millisecond}, 12_500_000},
		{"no delay gets the floor", Shape{Rate: 1e9}, MinDefaultQueueBytes},
		{"unlimited gets the floor", Shape{}, MinDefaultQueueBytes},
	}
	for _, tc := range cases {
		if got := tc.shape.EffectiveQueueBytes(); got != tc.want {
			t.Errorf("%s: EffectiveQueueBytes = %d, want %d", tc.name, got, tc.want)
		}
	}
}
