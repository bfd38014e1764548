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
	bad := Shape{Delay: -1, Rate: -1, QueueBytes: -1, Loss: 1.5, Burst: -1}
	err := Config{AtoB: bad, BtoA: Shape{Loss: -0.1}}.Validate()
	if err == nil {
		t.Fatal("Validate accepted negative and out-of-range fields")
	}
	for _, want := range []string{
		"a->b: delay", "rate", "queue", "loss 1.5", "burst", "b->a: loss -0.1",
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

func TestTokenBucketWaitIsExactlyEnough(t *testing.T) {
	// 1 Gbit/s = 125 bytes per microsecond; 2ms of credit = 250,000 bytes.
	b := newTokenBucket(1e9, 2*time.Millisecond, simStart)
	if !b.take(simStart, 250_000) {
		t.Fatal("a full bucket refused its whole burst")
	}
	if b.take(simStart, 1) {
		t.Fatal("an empty bucket paid for a byte")
	}
	wait := b.wait(simStart, 9000)
	if wait != 72*time.Microsecond {
		t.Errorf("wait for 9000 bytes = %v, want 72µs", wait)
	}
	if b.take(simStart.Add(wait-time.Microsecond), 9000) {
		t.Error("paid for a frame before its wait was over")
	}
	if !b.take(simStart.Add(wait), 9000) {
		t.Error("refused a frame once its wait was over")
	}

	// Credit saved while idle stops at the burst.
	later := simStart.Add(time.Second)
	if !b.take(later, 250_000) || b.take(later, 1) {
		t.Error("an idle second saved more or less than the 2ms burst")
	}
}

func TestTokenBucketFrameLargerThanBurst(t *testing.T) {
	// 8 Mbit/s with 1ms of credit holds 1000 bytes; a 3000-byte frame must
	// still pass and be paid back before the next one.
	b := newTokenBucket(8e6, time.Millisecond, simStart)
	if !b.take(simStart, 3000) {
		t.Fatal("a full bucket refused a frame larger than its burst")
	}
	if w := b.wait(simStart, 3000); w != 3*time.Millisecond {
		t.Errorf("after a 3000-byte frame the next waits %v, want 3ms", w)
	}
}

func TestTokenBucketUnlimited(t *testing.T) {
	b := newTokenBucket(0, DefaultBurst, simStart)
	for range 1000 {
		if !b.take(simStart, 65535) {
			t.Fatal("an unlimited bucket refused a frame")
		}
	}
	if w := b.wait(simStart, 65535); w != 0 {
		t.Errorf("an unlimited bucket asks to wait %v", w)
	}
}
